//! The session script `rr.sh` (see the file for its modes), rendered for one session.

use super::SessionPaths;
use crate::transport::shell_quote;

const TEMPLATE: &str = include_str!("rr.sh");

/// The script text with this session's tmux path, socket, name, directories and extra
/// environment (exported after the login environment) filled in.
pub fn render(paths: &SessionPaths, env: &[(String, String)]) -> String {
    TEMPLATE
        .replace("  : @ENV@\n", &posix_exports(env))
        .replace("@TMUX@", &shell_quote(&paths.tmux_path))
        .replace("@SOCK@", &shell_quote(&paths.socket))
        .replace("@SID@", &shell_quote(&paths.session_name))
        .replace("@SDIR@", &shell_quote(&paths.state_dir))
        .replace("@CDIR@", &shell_quote(&paths.commands_dir))
}

/// `export NAME=value` lines (POSIX sh, values quoted): the session script's extra environment,
/// and the same for the control script, which applies it before it resolves the login
/// environment.
pub fn posix_exports(env: &[(String, String)]) -> String {
    env.iter()
        .filter(|(k, _)| is_name(k))
        .map(|(k, v)| format!("export {k}={}\n", shell_quote(v)))
        .collect()
}

fn is_name(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_every_placeholder_quoted() {
        let p = SessionPaths::new("/usr/bin/tmux", "rr", "sess_1", "/home/a b/rr");
        let env = vec![
            ("RR_X".to_string(), "a'b".to_string()),
            ("bad name".to_string(), "x".to_string()),
        ];
        let s = render(&p, &env);
        for ph in ["@TMUX@", "@SOCK@", "@SID@", "@SDIR@", "@CDIR@", "@ENV@"] {
            assert!(!s.contains(ph), "unfilled {ph}");
        }
        assert!(s.contains("__rr_sdir='/home/a b/rr/sessions/sess_1'"));
        assert!(s.contains("export RR_X='a'\\''b'"));
        assert!(!s.contains("bad name"));
        assert!(s.contains("__rr_tmux=/usr/bin/tmux"));
    }
}
