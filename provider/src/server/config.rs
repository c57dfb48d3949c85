//! Provider configuration: environment variables, optionally a JSON config file.
//!
//! The host spawns `botmux-remote-runner` with no arguments and passes configuration through
//! `env`. Every variable is documented in `docs/provider.md`. An invalid value is not fatal at
//! start-up: it is reported as a correlated `failure` to the host's `hello`, with the variable to
//! fix, so the orchestrator shows the operator what to set.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use remote_runner_engine::error::{Error, ErrorCode, Result};
use remote_runner_engine::machine::{
    AuthType, HostKeyPolicy, LOCAL_MACHINE_ID, Machine, MachineField,
};

/// Default protocol provider name (the host's `expectedProvider`).
pub const DEFAULT_PROVIDER_NAME: &str = "remote-runner";

/// How a turn's content is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnMode {
    /// The content is a shell command line run in the persistent session shell.
    Shell,
    /// The content goes on stdin to this agent command, run in the session shell.
    Agent { command: String },
}

/// Validated provider configuration.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub provider_name: String,
    pub state_dir: PathBuf,
    /// The machine to run on (`local` when none is configured).
    pub machine_id: String,
    /// An ad-hoc machine from REMOTE_RUNNER_HOST & co., not in the store.
    pub adhoc_machine: Option<Machine>,
    /// Remote working directory; `None`: the machine's default_cwd (or the mapped host cwd).
    pub remote_cwd: Option<String>,
    /// `(host prefix, remote prefix)`: maps the host's `cwd` to a remote one.
    pub cwd_map: Option<(String, String)>,
    pub turn_mode: TurnMode,
    pub terminal_cols: u16,
    pub terminal_rows: u16,
    /// Minimum interval between two terminal_screen events.
    pub screen_interval: Duration,
    /// Whether to advertise and send terminal_screen.
    pub terminal: bool,
    /// Whether to advertise `outbound_message` (`"$RR_CHAT" send` in a turn).
    pub outbound: bool,
    /// Whether to advertise `session_tool` (`"$RR_CHAT" tool` in a turn).
    pub session_tool: bool,
}

impl ProviderConfig {
    /// Whether turns get the chat helper (`RR_CHAT`): either operation is on.
    pub fn chat(&self) -> bool {
        self.outbound || self.session_tool
    }
}

/// Names of every variable, for docs and error messages.
pub mod vars {
    pub const CONFIG: &str = "REMOTE_RUNNER_CONFIG";
    pub const PROVIDER_NAME: &str = "REMOTE_RUNNER_PROVIDER_NAME";
    pub const STATE_DIR: &str = "REMOTE_RUNNER_STATE_DIR";
    pub const MACHINE: &str = "REMOTE_RUNNER_MACHINE";
    pub const HOST: &str = "REMOTE_RUNNER_HOST";
    pub const PORT: &str = "REMOTE_RUNNER_PORT";
    pub const USER: &str = "REMOTE_RUNNER_USER";
    pub const KEY_PATH: &str = "REMOTE_RUNNER_KEY_PATH";
    pub const KNOWN_HOSTS: &str = "REMOTE_RUNNER_KNOWN_HOSTS";
    pub const REMOTE_CWD: &str = "REMOTE_RUNNER_REMOTE_CWD";
    pub const CWD_MAP: &str = "REMOTE_RUNNER_CWD_MAP";
    pub const TURN_MODE: &str = "REMOTE_RUNNER_TURN_MODE";
    pub const AGENT_COMMAND: &str = "REMOTE_RUNNER_AGENT_COMMAND";
    pub const TERMINAL: &str = "REMOTE_RUNNER_TERMINAL";
    pub const TERMINAL_COLS: &str = "REMOTE_RUNNER_TERMINAL_COLS";
    pub const TERMINAL_ROWS: &str = "REMOTE_RUNNER_TERMINAL_ROWS";
    pub const SCREEN_INTERVAL_MS: &str = "REMOTE_RUNNER_SCREEN_INTERVAL_MS";
    pub const OUTBOUND_MESSAGE: &str = "REMOTE_RUNNER_OUTBOUND_MESSAGE";
    pub const SESSION_TOOL: &str = "REMOTE_RUNNER_SESSION_TOOL";

    /// Every variable, in documentation order.
    pub const ALL: &[&str] = &[
        CONFIG,
        PROVIDER_NAME,
        STATE_DIR,
        MACHINE,
        HOST,
        PORT,
        USER,
        KEY_PATH,
        KNOWN_HOSTS,
        REMOTE_CWD,
        CWD_MAP,
        TURN_MODE,
        AGENT_COMMAND,
        TERMINAL,
        TERMINAL_COLS,
        TERMINAL_ROWS,
        SCREEN_INTERVAL_MS,
        OUTBOUND_MESSAGE,
        SESSION_TOOL,
    ];
}

impl ProviderConfig {
    /// Read the process environment (and the config file it names).
    pub fn from_env() -> Result<ProviderConfig> {
        let env: HashMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("REMOTE_RUNNER_"))
            .collect();
        Self::from_map(env)
    }

    /// Build from a map of variables. Values from the file named by `REMOTE_RUNNER_CONFIG` are
    /// used where the variable itself is not set.
    pub fn from_map(mut env: HashMap<String, String>) -> Result<ProviderConfig> {
        if let Some(path) = env.get(vars::CONFIG).cloned() {
            for (k, v) in read_config_file(&path)? {
                env.entry(k).or_insert(v);
            }
        }
        let get = |k: &str| {
            env.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };

        let provider_name =
            get(vars::PROVIDER_NAME).unwrap_or_else(|| DEFAULT_PROVIDER_NAME.into());
        if remote_runner_protocol::grammar::provider("provider", &provider_name).is_err() {
            return Err(bad(
                vars::PROVIDER_NAME,
                &format!(
                    "{provider_name:?} is not a valid provider name: use lowercase letters, digits, '.', '_' or '-', starting with a letter, at most 64"
                ),
            ));
        }
        let state_dir = match get(vars::STATE_DIR) {
            Some(p) => PathBuf::from(p),
            None => default_state_dir()?,
        };

        let adhoc_machine = match get(vars::HOST) {
            Some(host) => Some(adhoc_machine(&get, host)?),
            None => {
                for k in [vars::PORT, vars::USER, vars::KEY_PATH, vars::KNOWN_HOSTS] {
                    if get(k).is_some() {
                        return Err(bad(
                            k,
                            &format!(
                                "is set but {} is not; set {} to the remote host name or address",
                                vars::HOST,
                                vars::HOST
                            ),
                        ));
                    }
                }
                None
            }
        };
        let machine_id = match (&adhoc_machine, get(vars::MACHINE)) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    vars::MACHINE,
                    &format!("and {} are both set; set only one", vars::HOST),
                ));
            }
            (Some(m), None) => m.machine_id.clone(),
            (None, Some(id)) => id,
            (None, None) => LOCAL_MACHINE_ID.to_string(),
        };

        let remote_cwd = get(vars::REMOTE_CWD);
        if let Some(cwd) = &remote_cwd
            && !cwd.starts_with('/')
        {
            return Err(bad(
                vars::REMOTE_CWD,
                &format!("{cwd:?} must be an absolute path on the remote host"),
            ));
        }
        let cwd_map = match get(vars::CWD_MAP) {
            Some(v) => match v.split_once('=') {
                Some((from, to)) if from.starts_with('/') && to.starts_with('/') => Some((
                    from.trim_end_matches('/').to_string(),
                    to.trim_end_matches('/').to_string(),
                )),
                _ => {
                    return Err(bad(
                        vars::CWD_MAP,
                        "must be HOST_PREFIX=REMOTE_PREFIX with two absolute paths, e.g. /home/me/chats=/srv/work",
                    ));
                }
            },
            None => None,
        };

        let turn_mode = match get(vars::TURN_MODE).as_deref() {
            None | Some("shell") => TurnMode::Shell,
            Some("agent") => match get(vars::AGENT_COMMAND) {
                Some(command) => TurnMode::Agent { command },
                None => {
                    return Err(bad(
                        vars::AGENT_COMMAND,
                        &format!(
                            "must be set when {}=agent: the remote command that reads the turn on stdin, e.g. 'my-agent --print'",
                            vars::TURN_MODE
                        ),
                    ));
                }
            },
            Some(other) => {
                return Err(bad(
                    vars::TURN_MODE,
                    &format!("{other:?} is not a turn mode: use shell or agent"),
                ));
            }
        };

        let on_off = |name: &str| match get(name).as_deref() {
            None | Some("1") | Some("true") | Some("on") => Ok(true),
            Some("0") | Some("false") | Some("off") => Ok(false),
            Some(other) => Err(bad(name, &format!("{other:?}: use on or off"))),
        };
        let terminal = on_off(vars::TERMINAL)?;
        let outbound = on_off(vars::OUTBOUND_MESSAGE)?;
        let session_tool = on_off(vars::SESSION_TOOL)?;
        let terminal_cols = size_var(&get, vars::TERMINAL_COLS, 120)?;
        let terminal_rows = size_var(&get, vars::TERMINAL_ROWS, 40)?;
        let screen_interval = match get(vars::SCREEN_INTERVAL_MS) {
            Some(v) => match v.parse::<u64>() {
                Ok(ms) if (50..=60_000).contains(&ms) => Duration::from_millis(ms),
                _ => {
                    return Err(bad(
                        vars::SCREEN_INTERVAL_MS,
                        &format!("{v:?}: use milliseconds between 50 and 60000"),
                    ));
                }
            },
            None => Duration::from_millis(500),
        };

        Ok(ProviderConfig {
            provider_name,
            state_dir,
            machine_id,
            adhoc_machine,
            remote_cwd,
            cwd_map,
            turn_mode,
            terminal_cols,
            terminal_rows,
            screen_interval,
            terminal,
            outbound,
            session_tool,
        })
    }

    /// The remote working directory for a session started for the host's `cwd`.
    pub fn remote_cwd_for(&self, host_cwd: &str, machine: &Machine) -> String {
        if let Some(cwd) = &self.remote_cwd {
            return cwd.clone();
        }
        if let Some((from, to)) = &self.cwd_map
            && let Some(rest) = host_cwd.strip_prefix(from.as_str())
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{to}{rest}");
        }
        if machine.is_local() && host_cwd.starts_with('/') {
            return host_cwd.to_string();
        }
        machine.default_cwd.clone()
    }
}

fn bad(var: &str, what: &str) -> Error {
    Error::new(ErrorCode::ConfigInvalid, format!("{var} {what}"))
}

fn size_var(get: &impl Fn(&str) -> Option<String>, var: &str, default: u16) -> Result<u16> {
    match get(var) {
        None => Ok(default),
        Some(v) => match v.parse::<u16>() {
            Ok(n) if (1..=1000).contains(&n) => Ok(n),
            _ => Err(bad(
                var,
                &format!("{v:?}: use a whole number from 1 to 1000"),
            )),
        },
    }
}

fn adhoc_machine(get: &impl Fn(&str) -> Option<String>, host: String) -> Result<Machine> {
    let port = match get(vars::PORT) {
        None => 22,
        Some(v) => v.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
            bad(
                vars::PORT,
                &format!("{v:?}: use a TCP port from 1 to 65535"),
            )
        })?,
    };
    let user = match get(vars::USER) {
        Some(u) => u,
        None => std::env::var("USER").map_err(|_| {
            bad(
                vars::USER,
                "is not set and neither is USER; set the remote login name",
            )
        })?,
    };
    let key_path = get(vars::KEY_PATH);
    let machine = Machine {
        machine_id: format!(
            "{user}-at-{}",
            host.replace(
                |c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '-',
                "-"
            )
        ),
        host,
        port,
        user: user.clone(),
        auth_type: if key_path.is_some() {
            AuthType::Key
        } else {
            AuthType::Agent
        },
        key_path,
        default_cwd: if user == "root" {
            "/root".into()
        } else {
            format!("/home/{user}")
        },
        startup_commands: Vec::new(),
        path_mappings: Vec::new(),
        host_key_policy: HostKeyPolicy::Strict,
        known_hosts_file: get(vars::KNOWN_HOSTS),
        ssh_config_host: None,
        has_password: false,
        login_env: true,
        scheduler: Default::default(),
    };
    // The default cwd derives from the user, and there are no startup commands.
    machine.check().map_err(|p| {
        let var = match p.field {
            MachineField::Host => vars::HOST,
            MachineField::User | MachineField::DefaultCwd | MachineField::StartupCommand => {
                vars::USER
            }
        };
        bad(var, &p.problem)
    })?;
    Ok(machine)
}

fn default_state_dir() -> Result<PathBuf> {
    remote_runner_engine::engine::default_state_dir().ok_or_else(|| {
        bad(
            vars::STATE_DIR,
            "is not set and the home directory is unknown; set it to a private directory",
        )
    })
}

/// Read `{"machine": "...", "turn_mode": "agent", ...}`: keys are the variable names without the
/// `REMOTE_RUNNER_` prefix, in any case.
fn read_config_file(path: &str) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        bad(
            vars::CONFIG,
            &format!("names {path}, which cannot be read: {e}"),
        )
    })?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        bad(
            vars::CONFIG,
            &format!("names {path}, which is not valid JSON: {e}"),
        )
    })?;
    let obj = value.as_object().ok_or_else(|| {
        bad(
            vars::CONFIG,
            &format!("names {path}, which must hold one JSON object"),
        )
    })?;
    let mut out = Vec::new();
    for (k, v) in obj {
        let var = format!("REMOTE_RUNNER_{}", k.to_ascii_uppercase());
        if !vars::ALL.contains(&var.as_str()) || var == vars::CONFIG {
            return Err(bad(
                vars::CONFIG,
                &format!(
                    "file {path} has unknown key {k:?}; known keys: {}",
                    vars::ALL[1..]
                        .iter()
                        .map(|v| v.trim_start_matches("REMOTE_RUNNER_").to_ascii_lowercase())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let value = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            _ => {
                return Err(bad(
                    vars::CONFIG,
                    &format!("file {path}: key {k:?} must be a string, number or boolean"),
                ));
            }
        };
        out.push((var, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<ProviderConfig> {
        let mut m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        m.entry(vars::STATE_DIR.into())
            .or_insert_with(|| "/tmp/rr-test-state".into());
        ProviderConfig::from_map(m)
    }

    #[test]
    fn defaults_to_local_shell_mode() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.machine_id, "local");
        assert_eq!(c.turn_mode, TurnMode::Shell);
        assert_eq!(c.provider_name, "remote-runner");
        assert_eq!((c.terminal_cols, c.terminal_rows), (120, 40));
    }

    #[test]
    fn agent_mode_needs_a_command() {
        let e = cfg(&[(vars::TURN_MODE, "agent")]).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains(vars::AGENT_COMMAND), "{}", e.message);
        let c = cfg(&[(vars::TURN_MODE, "agent"), (vars::AGENT_COMMAND, "cat")]).unwrap();
        assert_eq!(
            c.turn_mode,
            TurnMode::Agent {
                command: "cat".into()
            }
        );
    }

    #[test]
    fn rejects_bad_values_naming_the_variable() {
        for (k, v) in [
            (vars::TURN_MODE, "chat"),
            (vars::TERMINAL_COLS, "0"),
            (vars::TERMINAL_ROWS, "1001"),
            (vars::PROVIDER_NAME, "Bad Name"),
            (vars::REMOTE_CWD, "relative/dir"),
            (vars::CWD_MAP, "nope"),
            (vars::SCREEN_INTERVAL_MS, "5"),
            (vars::PORT, "22"),
        ] {
            let e = cfg(&[(k, v)]).unwrap_err();
            assert_eq!(e.code, ErrorCode::ConfigInvalid, "{k}={v}");
            assert!(e.message.starts_with(k), "{k}: {}", e.message);
        }
    }

    #[test]
    fn an_adhoc_machine_is_checked_like_a_stored_one() {
        for (vars, at_fault) in [
            (
                [(vars::HOST, "-oProxyCommand=x"), (vars::USER, "ely")],
                vars::HOST,
            ),
            ([(vars::HOST, "gpu 1"), (vars::USER, "ely")], vars::HOST),
            ([(vars::HOST, "gpu1"), (vars::USER, "e ly")], vars::USER),
        ] {
            let e = cfg(&vars).unwrap_err();
            assert_eq!(e.code, ErrorCode::ConfigInvalid, "{vars:?}");
            assert!(e.message.starts_with(at_fault), "{vars:?}: {}", e.message);
        }
        let c = cfg(&[(vars::HOST, "gpu1"), (vars::USER, "ely")]).unwrap();
        assert_eq!(c.adhoc_machine.unwrap().default_cwd, "/home/ely");
    }

    #[test]
    fn maps_host_cwd_and_prefers_explicit_remote_cwd() {
        let m = Machine::local();
        let c = cfg(&[(vars::CWD_MAP, "/chats=/srv/work")]).unwrap();
        assert_eq!(c.remote_cwd_for("/chats/a/b", &m), "/srv/work/a/b");
        assert_eq!(c.remote_cwd_for("/chatsX", &m), "/chatsX");
        let c = cfg(&[(vars::REMOTE_CWD, "/x")]).unwrap();
        assert_eq!(c.remote_cwd_for("/chats/a", &m), "/x");
    }

    #[test]
    fn config_file_fills_unset_variables_and_rejects_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.json");
        std::fs::write(
            &p,
            r#"{"turn_mode":"agent","agent_command":"cat","terminal_cols":80}"#,
        )
        .unwrap();
        let c = cfg(&[
            (vars::CONFIG, p.to_str().unwrap()),
            (vars::TERMINAL_COLS, "100"),
        ])
        .unwrap();
        assert_eq!(
            c.turn_mode,
            TurnMode::Agent {
                command: "cat".into()
            }
        );
        assert_eq!(c.terminal_cols, 100);
        std::fs::write(&p, r#"{"tokn":"x"}"#).unwrap();
        let e = cfg(&[(vars::CONFIG, p.to_str().unwrap())]).unwrap_err();
        assert!(e.message.contains("unknown key"), "{}", e.message);
    }
}
