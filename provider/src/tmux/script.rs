//! The session script `rr.sh` (see the file for its modes), rendered for one session.

use super::SessionPaths;
use crate::transport::shell_quote;

const TEMPLATE: &str = include_str!("rr.sh");

/// The script text with this session's tmux path, socket, name and directories filled in.
pub fn render(paths: &SessionPaths) -> String {
    TEMPLATE
        .replace("@TMUX@", &shell_quote(&paths.tmux_path))
        .replace("@SOCK@", &shell_quote(&paths.socket))
        .replace("@SID@", &shell_quote(&paths.session_name))
        .replace("@SDIR@", &shell_quote(&paths.state_dir))
        .replace("@CDIR@", &shell_quote(&paths.commands_dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_every_placeholder_quoted() {
        let p = SessionPaths::new("/usr/bin/tmux", "rr", "sess_1", "/home/a b");
        let s = render(&p);
        for ph in ["@TMUX@", "@SOCK@", "@SID@", "@SDIR@", "@CDIR@"] {
            assert!(!s.contains(ph), "unfilled {ph}");
        }
        assert!(s.contains("__rr_sdir='/home/a b/.remote-runner/sessions/sess_1'"));
        assert!(s.contains("__rr_tmux=/usr/bin/tmux"));
    }
}
