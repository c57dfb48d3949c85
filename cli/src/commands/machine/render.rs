//! How a machine looks: its JSON (the record; it holds no secret) and its human rows/fields.

use remote_runner_engine::engine::MachineEntry;
use remote_runner_engine::machine::{AuthType, HostKeyPolicy, Machine};
use serde_json::{Value, json};

use crate::output::{Cell, Tone, relative_time};

pub fn machine_row(entry: &MachineEntry) -> Vec<Cell> {
    let m = &entry.machine;
    let (host, port) = if m.is_local() {
        ("this host".to_string(), "-".to_string())
    } else {
        (m.host.clone(), m.port.to_string())
    };
    vec![
        Cell::new(m.machine_id.clone(), Tone::Bold),
        Cell::plain(host),
        Cell::plain(port),
        Cell::plain(m.user.clone()),
        Cell::plain(auth_name(m.auth_type)),
        Cell::plain(m.default_cwd.clone()),
        match &entry.created_at {
            Some(created) => Cell::new(relative_time(created), Tone::Dim),
            None => Cell::new("built in", Tone::Dim),
        },
    ]
}

/// The public form of a machine: the record itself holds no secret, only `has_password`.
pub fn machine_json(m: &Machine) -> Value {
    serde_json::to_value(m).unwrap_or_else(|_| json!({ "machine_id": m.machine_id }))
}

pub fn machine_fields(m: &Machine) -> Vec<(&'static str, Cell)> {
    let mut fields = vec![("machine", Cell::new(m.machine_id.clone(), Tone::Bold))];
    if m.is_local() {
        fields.push(("host", Cell::plain("this host (no SSH)")));
    } else {
        fields.push(("host", Cell::plain(format!("{}:{}", m.host, m.port))));
    }
    fields.push(("user", Cell::plain(m.user.clone())));
    fields.push(("auth", Cell::plain(auth_name(m.auth_type))));
    if let Some(k) = &m.key_path {
        fields.push(("key path", Cell::plain(k.clone())));
    }
    if m.auth_type == AuthType::Password {
        let stored = if m.has_password { "stored" } else { "missing" };
        fields.push(("password", Cell::plain(stored)));
    }
    fields.push(("default cwd", Cell::plain(m.default_cwd.clone())));
    if !m.is_local() {
        let policy = match m.host_key_policy {
            HostKeyPolicy::Strict => "strict",
            HostKeyPolicy::AcceptNew => "accept-new",
        };
        fields.push(("host keys", Cell::plain(policy)));
    }
    if let Some(kh) = &m.known_hosts_file {
        fields.push(("known hosts", Cell::plain(kh.clone())));
    }
    if let Some(alias) = &m.ssh_config_host {
        fields.push(("ssh config", Cell::plain(format!("Host {alias}"))));
    }
    let startup = if m.startup_commands.is_empty() {
        "none".to_string()
    } else {
        m.startup_commands.join(" ; ")
    };
    fields.push(("startup", Cell::plain(startup)));
    let login_env = if m.login_env { "on" } else { "off" };
    fields.push(("login env", Cell::plain(login_env)));
    if let Some(args) = m.scheduler.slurm_args() {
        let shown = if args.is_empty() {
            "slurm".to_string()
        } else {
            format!("slurm ({})", args.join(" "))
        };
        fields.push(("scheduler", Cell::plain(shown)));
    }
    let maps = if m.path_mappings.is_empty() {
        "none".to_string()
    } else {
        m.path_mappings
            .iter()
            .map(|p| format!("{} -> {}", p.command_prefix, p.file_prefix))
            .collect::<Vec<_>>()
            .join(", ")
    };
    fields.push(("path maps", Cell::plain(maps)));
    fields
}

fn auth_name(a: AuthType) -> &'static str {
    match a {
        AuthType::Key => "key",
        AuthType::Agent => "agent",
        AuthType::Password => "password",
        AuthType::Local => "local",
    }
}
