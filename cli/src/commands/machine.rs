//! `remote-runner machine ...`: add, list, show, doctor, remove, configure-startup,
//! configure-path-map. Records live in the store; passwords only in the credential file.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use remote_runner_engine::engine::{MachineRemoval, split_slurm_args};
use remote_runner_engine::machine::{AuthType, LOCAL_MACHINE_ID, PathMapping, Scheduler};
use remote_runner_engine::{Error, ErrorCode, Result};
use serde_json::{Value, json};

use crate::context::Context;
use crate::output::{Block, Cell, Report, Tone, relative_time};
use render::{machine_fields, machine_json, machine_row};

mod add;
mod disconnect;
mod doctor;
mod render;

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
    /// Remove a machine record and its stored password (refused while it has active sessions,
    /// unless --force destroys them first; session records, logs and runs are kept)
    #[command(
        after_help = "Examples:\n  remote-runner machine remove lab-gpu-01 --json\n  remote-runner machine remove lab-gpu-01 --force --json   # destroy its active sessions first"
    )]
    Remove(RemoveArgs),
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
    /// Mark a machine as a Slurm login node (sessions in allocations, runs as batch jobs), set
    /// its default Slurm arguments, or take the scheduler away (docs/slurm.md)
    #[command(
        after_help = "Examples:\n  remote-runner machine configure-scheduler hpc --scheduler slurm \\\n      --slurm-args '--partition=debug --time=60' --json\n  remote-runner machine configure-scheduler hpc --scheduler none"
    )]
    ConfigureScheduler(ConfigureSchedulerArgs),
    /// End the background connection keeper of a machine (or of all) now; the next command
    /// connects afresh
    #[command(after_help = disconnect::EXAMPLES)]
    Disconnect(disconnect::DisconnectArgs),
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
  # a Slurm cluster's login node: sessions in allocations, runs as batch jobs (docs/slurm.md)
  remote-runner machine add hpc --host login.cluster.example --user ely --default-cwd /home/ely \\
      --scheduler slurm --slurm-args '--partition=debug --time=60'
  # interactive: run on a terminal with missing fields and answer the questions
  remote-runner machine add";

#[derive(Debug, Args)]
pub struct MachineIdArg {
    /// The machine id (`local` is this host)
    #[arg(value_name = "MACHINE_ID")]
    pub machine_id: String,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The machine id
    #[arg(value_name = "MACHINE_ID")]
    pub machine_id: String,
    /// Destroy the machine's active sessions first (their remote shells are stopped)
    #[arg(long)]
    pub force: bool,
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
    /// How to authenticate: key (--key-path, ssh_config IdentityFile or ~/.ssh/id_*), agent
    /// (ssh-agent) or password (kept in the credential file) [default: key, or password with
    /// --password-stdin]
    #[arg(long, value_enum, hide_possible_values = true)]
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
    /// Do not give sessions the environment of the account's login shell (its startup files are
    /// not run; `machine configure-startup --login-env on` turns it back on)
    #[arg(long)]
    pub no_login_env: bool,
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
    /// Who places sessions and runs: `slurm` makes this host a cluster's login node (sessions
    /// run in allocations, runs are batch jobs; docs/slurm.md) or `none` [default: none]
    #[arg(long, value_enum, hide_possible_values = true)]
    pub scheduler: Option<SchedulerArg>,
    /// Default arguments for salloc/sbatch, as one shell-quoted string (partition, time,
    /// account, gres, ...), e.g. "--partition=gpu --time=60"; options only: those
    /// remote-runner sets (job name, output, error, chdir, ...) are refused in any form
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub slurm_args: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedulerArg {
    /// Sessions and runs run on the machine itself
    None,
    /// The machine is a Slurm login node
    Slurm,
}

/// The machine's scheduler from `--scheduler` and `--slurm-args` (`None`: neither given).
pub fn scheduler_from(
    kind: Option<SchedulerArg>,
    slurm_args: Option<&str>,
) -> Result<Option<Scheduler>> {
    let args = slurm_args.map(split_slurm_args).transpose()?;
    match (kind, args) {
        (None, None) => Ok(None),
        (Some(SchedulerArg::None), None) => Ok(Some(Scheduler::None)),
        (Some(SchedulerArg::None), Some(_)) => Err(Error::invalid(
            "--slurm-args needs --scheduler slurm; drop it or pass --scheduler slurm",
        )),
        (None, Some(_)) => Err(Error::invalid(
            "--slurm-args needs --scheduler slurm (the machine's sessions and runs then go \
             through Slurm); add --scheduler slurm",
        )),
        (Some(SchedulerArg::Slurm), args) => Ok(Some(Scheduler::Slurm {
            args: args.unwrap_or_default(),
        })),
    }
}

#[derive(Debug, Args)]
pub struct ConfigureSchedulerArgs {
    #[arg(value_name = "MACHINE_ID")]
    pub machine_id: String,
    /// `slurm`: sessions in allocations, runs as batch jobs; `none`: on the machine itself
    #[arg(long, value_enum)]
    pub scheduler: SchedulerArg,
    /// Default arguments for salloc/sbatch, as one shell-quoted string, e.g.
    /// "--partition=gpu --time=60 --gres=gpu:1" (replaces the stored ones); options only:
    /// those remote-runner sets (job name, output, error, chdir, ...) are refused in any form
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub slurm_args: Option<String>,
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
    /// Whether sessions get the environment of the account's login shell (PATH, conda, nvm, ...)
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub login_env: Option<String>,
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
        MachineCommand::Add(args) => add::run(ctx, args),
        MachineCommand::List => list(ctx),
        MachineCommand::Show(args) => show(ctx, &args.machine_id),
        MachineCommand::Doctor(args) => doctor::run(ctx, &args.machine_id).await,
        MachineCommand::Remove(args) => remove(ctx, args).await,
        MachineCommand::ConfigureStartup(args) => configure_startup(ctx, args),
        MachineCommand::ConfigurePathMap(args) => configure_path_map(ctx, args),
        MachineCommand::ConfigureScheduler(args) => configure_scheduler(ctx, args),
        MachineCommand::Disconnect(args) => disconnect::run(ctx, args).await,
    }
}

// ---------------------------------------------------------------------------------------------
// list, show

fn list(ctx: &Context) -> Result<Report> {
    let machines = ctx.machines()?.list()?;
    let json_machines: Vec<Value> = machines.iter().map(|m| machine_json(&m.machine)).collect();
    let json = json!({
        "machines": json_machines,
        "summary": { "machine_count": json_machines.len() },
    });
    let rows = machines.iter().map(machine_row).collect();
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

fn show(ctx: &Context, machine_id: &str) -> Result<Report> {
    let entry = ctx.machines()?.show(machine_id)?;
    let mut fields = machine_fields(&entry.machine);
    if let (Some(created), Some(updated)) = (&entry.created_at, &entry.updated_at) {
        fields.push(("added", Cell::plain(relative_time(created))));
        fields.push(("updated", Cell::plain(relative_time(updated))));
    }
    Ok(Report::new(machine_json(&entry.machine)).human(vec![Block::Fields(fields)]))
}

// ---------------------------------------------------------------------------------------------
// remove, configure-*

async fn remove(ctx: &Context, args: RemoveArgs) -> Result<Report> {
    let machine_id = args.machine_id.as_str();
    let removed = match ctx.machines()?.remove(machine_id).await? {
        MachineRemoval::Removed(removed) => removed,
        // Its active sessions are destroyed first (their remote shells stopped); the machine
        // must be reachable, and the first failure stops the removal.
        MachineRemoval::ActiveSessions(_) if args.force => {
            ctx.engine()?
                .engine
                .remove_machine_forced(machine_id)
                .await?
        }
        MachineRemoval::ActiveSessions(active) => {
            return Err(Error::new(
                ErrorCode::NotReady,
                format!(
                    "machine {machine_id} has {} active session(s): {}; destroy them first \
                     (`remote-runner session destroy --session ID`), or add --force to \
                     destroy them and then remove the machine",
                    active.len(),
                    active.join(", ")
                ),
            ));
        }
    };
    let destroyed = &removed.destroyed_sessions;
    let retained = removed.retained_sessions;
    let json = json!({
        "machine_id": machine_id,
        "removed": true,
        "sessions_retained": true,
        "retained_session_count": retained,
        "destroyed_sessions": destroyed,
        "password_removed": removed.password_removed,
    });
    let mut human = Vec::new();
    if !destroyed.is_empty() {
        human.push(Block::Line(Cell::plain(format!(
            "Destroyed {} active session(s) first: {}.",
            destroyed.len(),
            destroyed.join(", ")
        ))));
    }
    human.push(Block::Line(Cell::new(
        format!(
            "Removed machine {machine_id}; its {retained} session record(s), logs and runs are kept."
        ),
        Tone::Good,
    )));
    Ok(Report::new(json).human(human))
}

fn configure_startup(ctx: &Context, args: ConfigureStartupArgs) -> Result<Report> {
    if args.startup_commands.is_empty()
        && !args.clear_startup_commands
        && args.default_cwd.is_none()
        && args.login_env.is_none()
    {
        return Err(Error::invalid(
            "nothing to change; pass --startup-command CMD (repeatable), \
             --clear-startup-commands, --default-cwd DIR or --login-env on|off",
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
    let machine = ctx
        .machines()?
        .configure(&args.machine_id, |m| {
            if args.clear_startup_commands {
                m.startup_commands.clear();
            } else if !args.startup_commands.is_empty() {
                m.startup_commands = args.startup_commands.clone();
            }
            if let Some(cwd) = &args.default_cwd {
                m.default_cwd = cwd.clone();
            }
            if let Some(switch) = &args.login_env {
                m.login_env = switch == "on";
            }
            Ok(())
        })
        .map_err(|e| explain_local_refusal(e, &args.machine_id))?;
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
    let machine = ctx
        .machines()?
        .configure(&args.machine_id, |m| {
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
        .map_err(|e| explain_local_refusal(e, &args.machine_id))?;
    Ok(Report::new(machine_json(&machine)).human(vec![Block::Fields(machine_fields(&machine))]))
}

fn configure_scheduler(ctx: &Context, args: ConfigureSchedulerArgs) -> Result<Report> {
    let scheduler =
        scheduler_from(Some(args.scheduler), args.slurm_args.as_deref())?.unwrap_or_default();
    let machine = ctx
        .machines()?
        .configure(&args.machine_id, |m| {
            m.scheduler = scheduler.clone();
            Ok(())
        })
        .map_err(|e| explain_local_refusal(e, &args.machine_id))?;
    Ok(Report::new(machine_json(&machine)).human(vec![Block::Fields(machine_fields(&machine))]))
}

/// `Machines::configure` refuses the built-in `local` machine in generic words; say what to do
/// instead. Other errors (an unknown id lists the known ones) pass through unchanged.
fn explain_local_refusal(err: Error, machine_id: &str) -> Error {
    if machine_id == LOCAL_MACHINE_ID && err.code == ErrorCode::InvalidArgument {
        return Error::invalid(format!(
            "the built-in machine {LOCAL_MACHINE_ID:?} has no stored configuration to change; \
             add a machine of your own with remote-runner machine add"
        ));
    }
    err
}

fn check_dir_path(flag: &str, path: &str) -> Result<()> {
    remote_runner_engine::machine::check_dir_path(path)
        .map_err(|why| Error::invalid(format!("{flag} {why}")))
}
