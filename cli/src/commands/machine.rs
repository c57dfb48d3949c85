//! `remote-runner machine ...`: add, list, show, doctor, remove, configure-startup,
//! configure-path-map. Records live in the store; passwords only in the credential file.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use remote_runner_provider::machine::{
    AuthType, HostKeyPolicy, LOCAL_MACHINE_ID, Machine, PathMapping,
};
use remote_runner_provider::secret::Secret;
use remote_runner_provider::ssh::config::{SshConfigSource, expand_tilde, machine_from_alias};
use remote_runner_provider::store::Store;
use remote_runner_provider::store::machines::{self, StoredMachine};
use remote_runner_provider::{Error, ErrorCode, Result};
use serde_json::{Value, json};

use crate::context::Context;
use crate::output::{Block, Cell, Report, Tone, relative_time};
use crate::prompt::{Prompter, password_from_stdin};

mod doctor;

pub const GROUP_EXAMPLES: &str = "\
Examples:
  remote-runner machine add lab-gpu-01 --host 192.0.2.10 --user ely --default-cwd /home/ely
  remote-runner machine list --json
  remote-runner machine doctor local";

#[derive(Debug, Subcommand)]
pub enum MachineCommand {
    /// Add a machine (asks for missing fields on a terminal)
    #[command(after_help = ADD_EXAMPLES)]
    Add(AddArgs),
    /// List machines (credentials redacted)
    #[command(
        after_help = "Examples:\n  remote-runner machine list\n  remote-runner machine list --json"
    )]
    List,
    /// Show one machine (credentials redacted)
    #[command(
        after_help = "Examples:\n  remote-runner machine show local\n  remote-runner machine show lab-gpu-01 --json"
    )]
    Show(MachineIdArg),
    /// Check that a machine is reachable, trusted, logged into, and ready for sessions
    #[command(
        after_help = "Examples:\n  remote-runner machine doctor local\n  remote-runner machine doctor lab-gpu-01 --timeout 10 --json"
    )]
    Doctor(MachineIdArg),
    /// Remove a machine record and its stored password (sessions, logs and runs are kept)
    #[command(after_help = "Examples:\n  remote-runner machine remove lab-gpu-01 --json")]
    Remove(MachineIdArg),
    /// Set the commands run right after login, and the default cwd (credentials kept)
    #[command(
        after_help = "Examples:\n  remote-runner machine configure-startup lab-win-01 --startup-command wsl \\\n      --default-cwd /mnt/c/Users/example/Desktop/SSHRunner --json\n  remote-runner machine configure-startup lab-win-01 --clear-startup-commands"
    )]
    ConfigureStartup(ConfigureStartupArgs),
    /// Map a command-side path prefix to the prefix SFTP sees (credentials kept)
    #[command(
        after_help = "Examples:\n  remote-runner machine configure-path-map lab-win-01 \\\n      --command-prefix /mnt/c/Users/example/Desktop/SSHRunner \\\n      --file-prefix C:/Users/example/Desktop/SSHRunner --json\n  remote-runner machine configure-path-map lab-win-01 --clear"
    )]
    ConfigurePathMap(ConfigurePathMapArgs),
}

const ADD_EXAMPLES: &str = "\
Examples:
  # key auth, fully scripted
  remote-runner machine add lab-gpu-01 --host 192.0.2.10 --user ely \\
      --key-path ~/.ssh/id_ed25519 --default-cwd /home/ely --json
  # password auth: the password comes from stdin, never from a flag
  printf '%s' \"$PASSWORD\" | remote-runner machine add lab-pw --host 192.0.2.11 --user ely \\
      --auth password --password-stdin --default-cwd /home/ely
  # an ~/.ssh/config Host alias (HostName, User, Port, IdentityFile are read from it)
  remote-runner machine add web1 --from-ssh-config
  # replace an existing record (its sessions, logs and runs are kept)
  remote-runner machine add lab-gpu-01 --replace --confirm-replace lab-gpu-01 \\
      --host 192.0.2.12 --user ely --default-cwd /home/ely
  # interactive: run on a terminal with missing fields and answer the questions
  remote-runner machine add";

#[derive(Debug, Args)]
pub struct MachineIdArg {
    /// The machine id (`local` is this host)
    #[arg(value_name = "MACHINE_ID")]
    pub machine_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthArg {
    /// A private key file (--key-path, ssh_config IdentityFile, or ~/.ssh/id_*)
    Key,
    /// Keys held by ssh-agent (SSH_AUTH_SOCK)
    Agent,
    /// A password kept in the credential file (give it with --password-stdin or at the prompt)
    Password,
}

impl From<AuthArg> for AuthType {
    fn from(a: AuthArg) -> AuthType {
        match a {
            AuthArg::Key => AuthType::Key,
            AuthArg::Agent => AuthType::Agent,
            AuthArg::Password => AuthType::Password,
        }
    }
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The machine id (letters, digits, '.', '_', '-'); may be an ~/.ssh/config Host alias
    #[arg(value_name = "MACHINE_ID")]
    pub id: Option<String>,
    /// The machine id, as a flag
    #[arg(long = "machine-id", value_name = "ID", conflicts_with = "id")]
    pub machine_id: Option<String>,
    /// Host name or IP address
    #[arg(long)]
    pub host: Option<String>,
    /// SSH port [default: 22]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Login user
    #[arg(long)]
    pub user: Option<String>,
    /// How to authenticate [default: key, or password with --password-stdin]
    #[arg(long, value_enum)]
    pub auth: Option<AuthArg>,
    /// Private key file for --auth key
    #[arg(long, value_name = "PATH")]
    pub key_path: Option<String>,
    /// Directory sessions start in on the machine
    #[arg(long, value_name = "DIR")]
    pub default_cwd: Option<String>,
    /// A command to run right after login, before the cwd is entered (repeat, in order)
    #[arg(long = "startup-command", value_name = "CMD")]
    pub startup_commands: Vec<String>,
    /// Trust and record an unknown host key on first connect (like StrictHostKeyChecking=accept-new)
    #[arg(long, conflicts_with = "strict")]
    pub accept_new: bool,
    /// Refuse unknown host keys (the default)
    #[arg(long)]
    pub strict: bool,
    /// known_hosts file to use instead of ~/.ssh/known_hosts
    #[arg(long, value_name = "PATH")]
    pub known_hosts_file: Option<String>,
    /// Read the password from stdin (implies --auth password)
    #[arg(long)]
    pub password_stdin: bool,
    /// Take HostName, User, Port, IdentityFile from the ~/.ssh/config Host named MACHINE_ID
    /// (automatic when --host is omitted and the alias exists)
    #[arg(long)]
    pub from_ssh_config: bool,
    /// ssh_config file to read instead of ~/.ssh/config (or $REMOTE_RUNNER_SSH_CONFIG)
    #[arg(long, value_name = "PATH")]
    pub ssh_config: Option<PathBuf>,
    /// Overwrite an existing machine with this id (needs --confirm-replace ID)
    #[arg(long, requires = "confirm_replace")]
    pub replace: bool,
    /// Repeat the machine id to confirm --replace
    #[arg(long, value_name = "ID", requires = "replace")]
    pub confirm_replace: Option<String>,
    /// Never ask questions, even on a terminal: missing fields are an error
    #[arg(long)]
    pub no_input: bool,
}

#[derive(Debug, Args)]
pub struct ConfigureStartupArgs {
    #[arg(value_name = "MACHINE_ID")]
    pub machine_id: String,
    /// Run after login, in order (repeat); replaces the stored list
    #[arg(long = "startup-command", value_name = "CMD")]
    pub startup_commands: Vec<String>,
    /// Remove every startup command
    #[arg(long, conflicts_with = "startup_commands")]
    pub clear_startup_commands: bool,
    /// New default working directory
    #[arg(long, value_name = "DIR")]
    pub default_cwd: Option<String>,
}

#[derive(Debug, Args)]
pub struct ConfigurePathMapArgs {
    #[arg(value_name = "MACHINE_ID")]
    pub machine_id: String,
    /// The prefix as commands in a session see it (e.g. /mnt/c/Users/x/proj)
    #[arg(long, value_name = "PREFIX", requires = "file_prefix")]
    pub command_prefix: Option<String>,
    /// The same directory as SFTP sees it (e.g. C:/Users/x/proj)
    #[arg(long, value_name = "PREFIX", requires = "command_prefix")]
    pub file_prefix: Option<String>,
    /// Remove every path mapping
    #[arg(long, conflicts_with_all = ["command_prefix", "file_prefix"])]
    pub clear: bool,
}

pub async fn run(ctx: &Context, command: MachineCommand) -> Result<Report> {
    match command {
        MachineCommand::Add(args) => add(ctx, args),
        MachineCommand::List => list(ctx),
        MachineCommand::Show(args) => show(ctx, &args.machine_id),
        MachineCommand::Doctor(args) => doctor::run(ctx, &args.machine_id).await,
        MachineCommand::Remove(args) => remove(ctx, &args.machine_id),
        MachineCommand::ConfigureStartup(args) => configure_startup(ctx, args),
        MachineCommand::ConfigurePathMap(args) => configure_path_map(ctx, args),
    }
}

// ---------------------------------------------------------------------------------------------
// add

fn add(ctx: &Context, args: AddArgs) -> Result<Report> {
    // A password piped on stdin means stdin is not for answering questions.
    let prompter = Prompter::detect(args.no_input || args.password_stdin);
    let id = match args.id.clone().or_else(|| args.machine_id.clone()) {
        Some(id) => id,
        None if prompter.interactive => prompter.ask("Machine id (e.g. lab-gpu-01)", None)?,
        None => return Err(missing_flags(&["MACHINE_ID (or --machine-id)"])),
    };
    machines::validate_machine_id(&id)?;
    if id == LOCAL_MACHINE_ID {
        return Err(Error::invalid(format!(
            "{LOCAL_MACHINE_ID:?} is the built-in machine for this host and cannot be added or \
             replaced; choose another machine id"
        )));
    }

    let store = ctx.store()?;
    let existing = machines::get(&store, &id)?;
    let replacing = confirm_replacement(ctx, &prompter, &args, &id, existing.as_ref())?;

    let base = ssh_config_base(&args, &id)?;
    let draft = fill_fields(ctx, &prompter, &args, &id, base)?;
    let password = resolve_password(&prompter, &args, &draft, existing.as_ref())?;
    warn_about_missing_key(ctx, &draft);

    let machine = Machine {
        has_password: draft.auth_type == AuthType::Password,
        ..draft
    };
    save(ctx, &store, &machine, password.as_ref(), replacing)?;

    let mut json = machine_json(&machine);
    json["replaced"] = json!(replacing);
    let verb = if replacing { "Replaced" } else { "Added" };
    let human = vec![
        Block::Line(Cell::new(
            format!(
                "{verb} machine {} ({}@{}:{}).",
                machine.machine_id, machine.user, machine.host, machine.port
            ),
            Tone::Good,
        )),
        Block::Line(Cell::plain(format!(
            "Check it with: remote-runner machine doctor {}",
            machine.machine_id
        ))),
    ];
    Ok(Report::new(json).human(human))
}

/// Whether this add replaces a record. Without `--replace` an existing id is `already_exists`,
/// unless a person at a terminal types the id again to confirm.
fn confirm_replacement(
    ctx: &Context,
    prompter: &Prompter,
    args: &AddArgs,
    id: &str,
    existing: Option<&Machine>,
) -> Result<bool> {
    if args.replace {
        let confirm = args.confirm_replace.as_deref().unwrap_or_default();
        if confirm != id {
            return Err(Error::invalid(format!(
                "--confirm-replace must repeat the machine id exactly; to replace {id} pass \
                 --replace --confirm-replace {id}"
            )));
        }
        return Ok(existing.is_some());
    }
    let Some(existing) = existing else {
        return Ok(false);
    };
    if !prompter.interactive {
        return Err(Error::new(
            ErrorCode::AlreadyExists,
            format!(
                "machine {id} already exists ({}@{}:{}); to overwrite it (its sessions, logs and \
                 runs are kept) add --replace --confirm-replace {id}",
                existing.user, existing.host, existing.port
            ),
        ));
    }
    ctx.out.note(&format!(
        "machine {id} already exists ({}@{}:{}). Replacing it keeps its sessions, logs and runs.",
        existing.user, existing.host, existing.port
    ));
    let typed = prompter.ask_optional(
        &format!("Type {id} to replace it, or press Enter to cancel"),
        None,
    )?;
    if typed.as_deref() != Some(id) {
        return Err(Error::new(
            ErrorCode::AlreadyExists,
            format!(
                "machine {id} already exists and was left unchanged (replacement not confirmed)"
            ),
        ));
    }
    Ok(true)
}

/// The machine an ssh_config Host alias describes, when asked for (`--from-ssh-config`) or when
/// `--host` is omitted and the alias exists.
fn ssh_config_base(args: &AddArgs, id: &str) -> Result<Option<Machine>> {
    if !args.from_ssh_config && args.host.is_some() {
        return Ok(None);
    }
    let source = match &args.ssh_config {
        Some(path) => SshConfigSource::File(path.clone()),
        None => SshConfigSource::Default,
    };
    let found = machine_from_alias(id, &source)?;
    if found.is_none() && args.from_ssh_config {
        return Err(Error::invalid(format!(
            "--from-ssh-config: no `Host {id}` entry in the ssh_config file; add one, pass \
             --ssh-config PATH, or give --host/--user instead"
        )));
    }
    Ok(found)
}

/// Combine flags, the ssh_config base and (on a terminal) answers into a machine record.
fn fill_fields(
    ctx: &Context,
    prompter: &Prompter,
    args: &AddArgs,
    id: &str,
    base: Option<Machine>,
) -> Result<Machine> {
    let from_alias = base.is_some();
    let base = base.unwrap_or_else(|| Machine {
        machine_id: id.to_string(),
        host: String::new(),
        port: 22,
        user: String::new(),
        auth_type: AuthType::Key,
        key_path: None,
        default_cwd: String::new(),
        startup_commands: Vec::new(),
        path_mappings: Vec::new(),
        host_key_policy: HostKeyPolicy::Strict,
        known_hosts_file: None,
        ssh_config_host: None,
        has_password: false,
    });
    let host = args.host.clone().or(from_alias.then(|| base.host.clone()));
    let user = args.user.clone().or(from_alias.then(|| base.user.clone()));
    let default_cwd = args
        .default_cwd
        .clone()
        .or(from_alias.then(|| base.default_cwd.clone()));

    let mut missing = Vec::new();
    if host.is_none() {
        missing.push("--host");
    }
    if user.is_none() {
        missing.push("--user");
    }
    if default_cwd.is_none() {
        missing.push("--default-cwd");
    }
    if !missing.is_empty() && !prompter.interactive {
        return Err(missing_flags(&missing));
    }
    // Optional fields (port, auth, key, startup commands) are asked for only in a session that
    // is interactive anyway; a command line with every required flag runs without questions.
    let interactive_fill = prompter.interactive && !missing.is_empty();

    let host = match host {
        Some(h) => h,
        None => prompter.ask("Host or IP", None)?,
    };
    let port = match args.port {
        Some(p) => p,
        None if interactive_fill => ask_port(prompter)?,
        None => base.port,
    };
    let user = match user {
        Some(u) => u,
        None => {
            let local_user = std::env::var("USER").ok();
            prompter.ask("Login user", local_user.as_deref())?
        }
    };
    let auth_type = match (args.auth, args.password_stdin) {
        (Some(a), _) => AuthType::from(a),
        (None, true) => AuthType::Password,
        (None, false) if interactive_fill => ask_auth(prompter)?,
        (None, false) => base.auth_type,
    };
    let key_path = match &args.key_path {
        Some(k) => Some(k.clone()),
        None if interactive_fill && auth_type == AuthType::Key => prompter.ask_optional(
            "Private key file (Enter for ~/.ssh/id_ed25519, id_rsa, ...)",
            None,
        )?,
        None => base.key_path.clone(),
    };
    let default_cwd = match default_cwd {
        Some(d) => d,
        None => {
            let home = if user == "root" {
                "/root".to_string()
            } else {
                format!("/home/{user}")
            };
            prompter.ask("Default working directory", Some(&home))?
        }
    };
    let startup_commands = if !args.startup_commands.is_empty() {
        args.startup_commands.clone()
    } else if interactive_fill {
        prompter.ask_lines("Startup commands run after login, before cd (optional)")?
    } else {
        base.startup_commands.clone()
    };
    let host_key_policy = if args.accept_new {
        HostKeyPolicy::AcceptNew
    } else if args.strict {
        HostKeyPolicy::Strict
    } else {
        base.host_key_policy
    };

    let machine = Machine {
        machine_id: id.to_string(),
        host,
        port,
        user,
        auth_type,
        key_path: if auth_type == AuthType::Key {
            key_path
        } else {
            None
        },
        default_cwd,
        startup_commands,
        path_mappings: Vec::new(),
        host_key_policy,
        known_hosts_file: args.known_hosts_file.clone().or(base.known_hosts_file),
        ssh_config_host: base.ssh_config_host,
        has_password: false,
    };
    if args.key_path.is_some() && auth_type != AuthType::Key {
        ctx.out
            .note("--key-path is ignored because --auth is not key");
    }
    validate(&machine)?;
    Ok(machine)
}

fn ask_port(prompter: &Prompter) -> Result<u16> {
    loop {
        let answer = prompter.ask("SSH port", Some("22"))?;
        match answer.parse::<u16>() {
            Ok(p) if p > 0 => return Ok(p),
            _ => eprintln!("  a port is a number from 1 to 65535"),
        }
    }
}

fn ask_auth(prompter: &Prompter) -> Result<AuthType> {
    loop {
        let answer = prompter.ask("Authentication (key, agent, password)", Some("key"))?;
        match AuthArg::from_str(&answer, true) {
            Ok(a) => return Ok(a.into()),
            Err(_) => eprintln!("  answer key, agent or password"),
        }
    }
}

/// The password to store: piped (`--password-stdin`), typed (hidden), or, on replacement, the
/// one already stored. `None` when the auth type does not use one.
fn resolve_password(
    prompter: &Prompter,
    args: &AddArgs,
    machine: &Machine,
    existing: Option<&Machine>,
) -> Result<Option<Secret>> {
    if machine.auth_type != AuthType::Password {
        if args.password_stdin {
            return Err(Error::invalid(
                "--password-stdin only applies to --auth password; drop it or use --auth password",
            ));
        }
        return Ok(None);
    }
    if args.password_stdin {
        return password_from_stdin().map(Some);
    }
    if prompter.interactive {
        return prompter
            .ask_password(&format!("Password for {}@{}", machine.user, machine.host))
            .map(Some);
    }
    if existing.is_some_and(|m| m.has_password) && args.replace {
        return Ok(None); // keep the stored password
    }
    Err(Error::invalid(
        "--auth password needs the password on stdin: add --password-stdin and pipe it in \
         (passwords are never accepted as flag values), or run on a terminal to type it",
    ))
}

/// Write the record and the password so that a failure leaves no half-added machine.
fn save(
    ctx: &Context,
    store: &Store,
    machine: &Machine,
    password: Option<&Secret>,
    replacing: bool,
) -> Result<()> {
    let creds = ctx.credentials()?;
    if replacing {
        if let Some(password) = password {
            creds.set_password(&machine.machine_id, password)?;
        }
        machines::replace(store, machine)?;
        if machine.auth_type != AuthType::Password {
            creds.remove(&machine.machine_id)?;
        }
        return Ok(());
    }
    machines::insert(store, machine)?;
    if let Some(password) = password
        && let Err(err) = creds.set_password(&machine.machine_id, password)
    {
        let _ = machines::remove(store, &machine.machine_id);
        return Err(err);
    }
    Ok(())
}

fn validate(m: &Machine) -> Result<()> {
    if m.host.is_empty() || m.host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(format!(
            "--host {:?} is not a host name or IP address; give one like 192.0.2.10 or gpu.example.com",
            m.host
        )));
    }
    if m.host.starts_with('-') {
        return Err(Error::invalid(
            "--host must not start with '-'; give a host name or IP address",
        ));
    }
    if m.user.is_empty() || m.user.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(format!(
            "--user {:?} is not a login name; give the remote account, e.g. --user ely",
            m.user
        )));
    }
    check_dir_path("--default-cwd", &m.default_cwd)?;
    if m.startup_commands.iter().any(|c| c.trim().is_empty()) {
        return Err(Error::invalid(
            "--startup-command must not be empty; drop the empty one",
        ));
    }
    Ok(())
}

fn check_dir_path(flag: &str, path: &str) -> Result<()> {
    if !(path.starts_with('/') || path == "~" || path.starts_with("~/")) {
        return Err(Error::invalid(format!(
            "{flag} {path:?} must be an absolute path on the machine (like /home/ely) or start \
             with ~/"
        )));
    }
    if path.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{flag} must not contain control characters"
        )));
    }
    Ok(())
}

fn warn_about_missing_key(ctx: &Context, m: &Machine) {
    if let Some(key) = &m.key_path {
        let expanded = expand_tilde(Path::new(key));
        if !expanded.exists() {
            ctx.out.note(&format!(
                "key file {key} does not exist on this host yet; create it or fix --key-path \
                 before connecting"
            ));
        }
    }
}

fn missing_flags(missing: &[&str]) -> Error {
    Error::invalid(format!(
        "missing {}; stdin is not a terminal (or --no-input was given), so remote-runner cannot \
         ask. Pass them as flags, for example: remote-runner machine add lab-gpu-01 --host \
         192.0.2.10 --user ely --default-cwd /home/ely",
        missing.join(", ")
    ))
}

// ---------------------------------------------------------------------------------------------
// list, show

fn list(ctx: &Context) -> Result<Report> {
    let store = ctx.store()?;
    let stored = machines::list_stored(&store)?;
    let local = Machine::local();
    let json_machines: Vec<Value> = std::iter::once(machine_json(&local))
        .chain(stored.iter().map(|s| machine_json(&s.machine)))
        .collect();
    let json = json!({
        "machines": json_machines,
        "summary": { "machine_count": json_machines.len() },
    });
    let mut rows = vec![machine_row(&local, None)];
    rows.extend(stored.iter().map(|s| machine_row(&s.machine, Some(s))));
    let human = vec![Block::Table {
        headers: vec![
            "MACHINE",
            "HOST",
            "PORT",
            "USER",
            "AUTH",
            "DEFAULT CWD",
            "ADDED",
        ],
        rows,
        empty: String::new(),
    }];
    Ok(Report::new(json).human(human))
}

fn machine_row(m: &Machine, stored: Option<&StoredMachine>) -> Vec<Cell> {
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
        match stored {
            Some(s) => Cell::new(relative_time(&s.created_at), Tone::Dim),
            None => Cell::new("built in", Tone::Dim),
        },
    ]
}

fn show(ctx: &Context, machine_id: &str) -> Result<Report> {
    let store = ctx.store()?;
    let (machine, stored) = if machine_id == LOCAL_MACHINE_ID {
        (Machine::local(), None)
    } else {
        let s = machines::get_stored(&store, machine_id)?
            .ok_or_else(|| machines::unknown_machine(store.conn(), machine_id))?;
        (s.machine.clone(), Some(s))
    };
    let mut fields = machine_fields(&machine);
    if let Some(s) = &stored {
        fields.push(("added", Cell::plain(relative_time(&s.created_at))));
        fields.push(("updated", Cell::plain(relative_time(&s.updated_at))));
    }
    Ok(Report::new(machine_json(&machine)).human(vec![Block::Fields(fields)]))
}

/// The public form of a machine: the record itself holds no secret, only `has_password`.
fn machine_json(m: &Machine) -> Value {
    serde_json::to_value(m).unwrap_or_else(|_| json!({ "machine_id": m.machine_id }))
}

fn machine_fields(m: &Machine) -> Vec<(&'static str, Cell)> {
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

// ---------------------------------------------------------------------------------------------
// remove, configure-*

fn remove(ctx: &Context, machine_id: &str) -> Result<Report> {
    let store = ctx.store()?;
    if !machines::remove(&store, machine_id)? {
        return Err(machines::unknown_machine(store.conn(), machine_id));
    }
    let password_removed = ctx.credentials()?.remove(machine_id)?;
    let retained = session_count(&store, machine_id)?;
    let json = json!({
        "machine_id": machine_id,
        "removed": true,
        "sessions_retained": true,
        "retained_session_count": retained,
        "password_removed": password_removed,
    });
    let human = vec![Block::Line(Cell::new(
        format!(
            "Removed machine {machine_id}; its {retained} session record(s), logs and runs are kept."
        ),
        Tone::Good,
    ))];
    Ok(Report::new(json).human(human))
}

/// Sessions recorded for a machine (kept on removal so their logs stay readable).
fn session_count(store: &Store, machine_id: &str) -> Result<i64> {
    store
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM sessions WHERE machine_id = ?1",
            [machine_id],
            |r| r.get(0),
        )
        .map_err(|e| Error::new(ErrorCode::Store, format!("cannot count sessions: {e}")))
}

fn configure_startup(ctx: &Context, args: ConfigureStartupArgs) -> Result<Report> {
    if args.startup_commands.is_empty()
        && !args.clear_startup_commands
        && args.default_cwd.is_none()
    {
        return Err(Error::invalid(
            "nothing to change; pass --startup-command CMD (repeatable), \
             --clear-startup-commands, or --default-cwd DIR",
        ));
    }
    if args.startup_commands.iter().any(|c| c.trim().is_empty()) {
        return Err(Error::invalid(
            "--startup-command must not be empty; drop the empty one",
        ));
    }
    if let Some(cwd) = &args.default_cwd {
        check_dir_path("--default-cwd", cwd)?;
    }
    let store = ctx.store()?;
    let machine = machines::update(&store, &args.machine_id, |m| {
        if args.clear_startup_commands {
            m.startup_commands.clear();
        } else if !args.startup_commands.is_empty() {
            m.startup_commands = args.startup_commands.clone();
        }
        if let Some(cwd) = &args.default_cwd {
            m.default_cwd = cwd.clone();
        }
        Ok(())
    })
    .map_err(|e| unknown_or(e, &store, &args.machine_id))?;
    Ok(Report::new(machine_json(&machine)).human(vec![Block::Fields(machine_fields(&machine))]))
}

fn configure_path_map(ctx: &Context, args: ConfigurePathMapArgs) -> Result<Report> {
    let mapping = match (&args.command_prefix, &args.file_prefix) {
        (Some(c), Some(f)) => {
            if c.is_empty() || f.is_empty() {
                return Err(Error::invalid(
                    "--command-prefix and --file-prefix must not be empty",
                ));
            }
            check_dir_path("--command-prefix", c)?;
            Some(PathMapping {
                command_prefix: c.trim_end_matches('/').to_string(),
                file_prefix: f.trim_end_matches(['/', '\\']).to_string(),
            })
        }
        _ if args.clear => None,
        _ => {
            return Err(Error::invalid(
                "nothing to change; pass --command-prefix PREFIX --file-prefix PREFIX, or --clear",
            ));
        }
    };
    let store = ctx.store()?;
    let machine = machines::update(&store, &args.machine_id, |m| {
        match &mapping {
            Some(map) => {
                m.path_mappings
                    .retain(|p| p.command_prefix != map.command_prefix);
                m.path_mappings.push(map.clone());
            }
            None => m.path_mappings.clear(),
        }
        Ok(())
    })
    .map_err(|e| unknown_or(e, &store, &args.machine_id))?;
    Ok(Report::new(machine_json(&machine)).human(vec![Block::Fields(machine_fields(&machine))]))
}

/// `machines::update` already names unknown ids; this only keeps the error as it is, and exists
/// so that both configure commands explain a refusal for `local` the same way.
fn unknown_or(err: Error, _store: &Store, machine_id: &str) -> Error {
    if machine_id == LOCAL_MACHINE_ID && err.code == ErrorCode::InvalidArgument {
        return Error::invalid(format!(
            "the built-in machine {LOCAL_MACHINE_ID:?} has no stored configuration to change; \
             add a machine of your own with remote-runner machine add"
        ));
    }
    err
}
