//! `machine add`: flags, an ssh_config alias, or questions on a terminal -> one machine record
//! and (for password auth) one credential, written so that a failure leaves nothing half-added.

use std::io::IsTerminal;

use clap::ValueEnum;
use remote_runner_engine::engine::machines::missing_key_file;
use remote_runner_engine::engine::{machine_from_ssh_alias, validate_machine_id};
use remote_runner_engine::machine::{
    AuthType, HostKeyPolicy, LOCAL_MACHINE_ID, Machine, MachineField,
};
use remote_runner_engine::secret::Secret;
use remote_runner_engine::{Error, ErrorCode, Result};
use serde_json::json;

use super::render::machine_json;
use super::{AddArgs, AuthArg};
use crate::context::Context;
use crate::output::{Block, Cell, Report, Tone};
use crate::prompt::{Prompter, password_from_stdin};

pub fn run(ctx: &Context, args: AddArgs) -> Result<Report> {
    // A password piped on stdin means stdin is not for answering questions.
    let prompter = Prompter::detect(args.no_input || args.password_stdin);
    // The contract's replace form names the machine only in --confirm-replace.
    let named = args.id.clone().or_else(|| args.machine_id.clone());
    let named = named.or_else(|| args.confirm_replace.clone().filter(|_| args.replace));
    let id = match named {
        Some(id) => id,
        None if prompter.interactive => prompter.ask("Machine id (e.g. lab-gpu-01)", None)?,
        None => return Err(missing_flags(&["MACHINE_ID (or --machine-id)"])),
    };
    validate_machine_id(&id)?;
    if id.eq_ignore_ascii_case(LOCAL_MACHINE_ID) {
        return Err(Error::invalid(format!(
            "{LOCAL_MACHINE_ID:?} is the built-in machine for this host and cannot be added or \
             replaced (machine ids are compared without regard to case); choose another machine id"
        )));
    }

    let machines = ctx.machines()?;
    let existing = machines.stored(&id)?;
    let replacing = confirm_replacement(ctx, &prompter, &args, &id, existing.as_ref())?;

    // `--replace` keeps what the flags do not change: the stored record is the starting point
    // (so `machine add --replace --confirm-replace ID` alone works, with or without a terminal).
    let base = match existing.as_ref() {
        Some(m) if args.replace && !args.from_ssh_config => Some(m.clone()),
        _ => ssh_config_base(&args, &id)?,
    };
    let draft = fill_fields(ctx, &prompter, &args, &id, base)?;
    let password = resolve_password(&prompter, &args, &draft, existing.as_ref())?;
    warn_about_missing_key(ctx, &draft);

    let machine = Machine {
        has_password: draft.auth_type == AuthType::Password,
        ..draft
    };
    if replacing {
        machines.replace(&machine, password.as_ref())?;
    } else {
        machines.add(&machine, password.as_ref())?;
    }

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
    let found = machine_from_ssh_alias(id, args.ssh_config.as_deref())?;
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
        login_env: true,
        scheduler: Default::default(),
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
        path_mappings: base.path_mappings,
        host_key_policy,
        known_hosts_file: args.known_hosts_file.clone().or(base.known_hosts_file),
        ssh_config_host: base.ssh_config_host,
        has_password: false,
        login_env: base.login_env && !args.no_login_env,
        scheduler: super::scheduler_from(args.scheduler, args.slurm_args.as_deref())?
            .unwrap_or(base.scheduler),
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
        if std::io::stdin().is_terminal() {
            return Err(Error::invalid(
                "--password-stdin reads a pipe, but stdin is a terminal; drop --password-stdin \
                 to type the password at a hidden prompt, or pipe it in: ... --password-stdin < FILE",
            ));
        }
        return password_from_stdin().map(Some);
    }
    if existing.is_some_and(|m| m.has_password) && args.replace {
        return Ok(None); // keep the stored password
    }
    if prompter.interactive {
        return prompter
            .ask_password(&format!("Password for {}@{}", machine.user, machine.host))
            .map(Some);
    }
    Err(Error::invalid(
        "--auth password needs the password on stdin: add --password-stdin and pipe it in \
         (passwords are never accepted as flag values), or run on a terminal to type it",
    ))
}

/// The engine's check of the record, naming the flag of the field at fault.
fn validate(m: &Machine) -> Result<()> {
    m.check().map_err(|p| {
        let flag = match p.field {
            MachineField::Host => "--host",
            MachineField::User => "--user",
            MachineField::DefaultCwd => "--default-cwd",
            MachineField::StartupCommand => "--startup-command",
        };
        p.into_error(flag)
    })
}

fn warn_about_missing_key(ctx: &Context, m: &Machine) {
    if let Some(key) = &m.key_path
        && missing_key_file(m).is_some()
    {
        ctx.out.note(&format!(
            "key file {key} does not exist on this host yet; create it or fix --key-path before \
             connecting"
        ));
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
