//! The tool table: names, descriptions, input schemas (from the argument structs) and honest
//! annotations, and the dispatch from a call to its group's handler.

use std::sync::Arc;

use remote_runner_engine::{Error, Result};
use rmcp::model::Tool;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::reply::Reply;
use super::{Call, command, file, machine, run, send, session};

/// The server's instructions: which machines its tools reach (all configured ones, `local`
/// among them, or only those `--machine` names), then how to use the tools.
pub fn instructions(machines: &[String]) -> String {
    let reach = if machines.is_empty() {
        "configured Linux machines (`local` is the server's host)".to_string()
    } else if machines.iter().any(|m| m == "local") {
        format!(
            "the Linux machines {} (`local` is the server's host)",
            machines.join(", ")
        )
    } else {
        format!(
            "the Linux machines {} only (not `local`, the server's host)",
            machines.join(", ")
        )
    };
    format!("Runs commands on {reach} {USAGE}")
}

const USAGE: &str = "in persistent shell sessions: machine_list, then session_create, then \
session_exec (cd and export persist). A failing command is a result with its exit_code, not a \
tool error. Output in a result is capped (head and tail kept): read all of it with file_read on \
the record's remote_stdout_file / remote_stderr_file. A call that waits longer than timeout_s \
returns status running with the command_id: follow it with command_wait, stop it with \
command_stop.";

/// One tool: what a client sees, and whether `--read-only` keeps it.
pub struct Spec {
    pub name: &'static str,
    description: &'static str,
    schema: fn() -> Value,
    pub read_only: bool,
    destructive: bool,
    idempotent: bool,
}

fn schema<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({}));
    if let Some(obj) = v.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        obj.entry("properties").or_insert_with(|| json!({}));
    }
    v
}

const SPECS: &[Spec] = &[
    Spec {
        name: "machine_list",
        description: "List the machines this server may use (id, host, user, default cwd). `local` is the server's own host.",
        schema: schema::<machine::ListArgs>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    Spec {
        name: "session_create",
        description: "Start a persistent shell session on a machine; returns its session_id. The shell keeps cd, export, aliases between commands.",
        schema: schema::<session::CreateArgs>,
        read_only: false,
        destructive: false,
        idempotent: false,
    },
    Spec {
        name: "session_list",
        description: "List sessions (active, lost and destroyed) on the served machines.",
        schema: schema::<session::ListArgs>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    Spec {
        name: "session_exec",
        description: "Run a shell command in a session and wait for it (at most timeout_s, default 60): returns status, exit_code, stdout, stderr (capped; head and tail kept). A failing command is a result, not an error. Past timeout_s it returns status running with the command_id (the command goes on: command_wait). background: true returns at once.",
        schema: schema::<command::ExecArgs>,
        read_only: false,
        destructive: true,
        idempotent: false,
    },
    Spec {
        name: "command_wait",
        description: "Wait for a command to end (at most timeout_s, default 60) and return its record; the command is never stopped by the wait.",
        schema: schema::<command::WaitArgs>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    Spec {
        name: "command_stop",
        description: "Stop a running command (Ctrl-C, then TERM, then KILL). Repeating it is safe; an ended command is returned unchanged with already_finished: true.",
        schema: schema::<command::StopArgs>,
        read_only: false,
        destructive: true,
        idempotent: true,
    },
    Spec {
        name: "session_send",
        description: "Type input into the session's terminal (Enter pressed after it), e.g. to answer a prompt of an interactive program; read the reply with session_read.",
        schema: schema::<send::SendArgs>,
        read_only: false,
        destructive: true,
        idempotent: false,
    },
    Spec {
        name: "session_read",
        description: "Read the session's terminal transcript from byte offset since (default 0); returns text and the cursor for the next read.",
        schema: schema::<session::ReadArgs>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    Spec {
        name: "session_destroy",
        description: "Stop the session's shell and its running commands; records, logs and transcript are kept. Repeating it is safe: a destroyed session is returned as it is.",
        schema: schema::<session::DestroyArgs>,
        read_only: false,
        destructive: true,
        idempotent: true,
    },
    Spec {
        name: "file_read",
        description: "Read bytes of a file on the session's machine from offset (default 0), at most length (default and cap: the server's output limit). Relative paths are under the session's cwd. Text comes back as is; other bytes as base64.",
        schema: schema::<file::ReadArgs>,
        read_only: true,
        destructive: false,
        idempotent: true,
    },
    Spec {
        name: "file_write",
        description: "Write text to a file on the session's machine (replaced atomically; parent directories must exist). Relative paths are under the session's cwd.",
        schema: schema::<file::WriteArgs>,
        read_only: false,
        destructive: true,
        idempotent: true,
    },
    Spec {
        name: "file_put",
        description: "Upload a file or directory from the server's host (local) to the session's machine (remote); replaces what is there. local must lie beneath one of the server's roots.",
        schema: schema::<file::TransferArgs>,
        read_only: false,
        destructive: true,
        idempotent: true,
    },
    Spec {
        name: "file_get",
        description: "Download a file or directory from the session's machine (remote) to the server's host (local); replaces what is there. local must lie beneath one of the server's roots.",
        schema: schema::<file::TransferArgs>,
        read_only: false,
        destructive: true,
        idempotent: true,
    },
    Spec {
        name: "run_once",
        description: "One closed loop on a machine: a fresh session, inputs uploaded, the command run, artifacts downloaded, the session destroyed; returns the run manifest with the exit code.",
        schema: schema::<run::OnceArgs>,
        read_only: false,
        destructive: true,
        idempotent: false,
    },
    Spec {
        name: "code_run",
        description: "Run a JavaScript (node) or Python (python3) program as a fresh process on a machine; returns its logs and value (or its error).",
        schema: schema::<run::CodeArgs>,
        read_only: false,
        destructive: true,
        idempotent: false,
    },
];

pub fn find(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == name)
}

/// The tools a client sees: every one, or only the reading ones under `--read-only`.
pub fn list(read_only: bool) -> Vec<Tool> {
    SPECS
        .iter()
        .filter(|s| !read_only || s.read_only)
        .map(|s| {
            let mut annotations = rmcp::model::ToolAnnotations::new()
                .read_only(s.read_only)
                .destructive(s.destructive)
                .idempotent(s.idempotent)
                .open_world(true);
            annotations.title = Some(s.name.replace('_', " "));
            let Value::Object(input) = (s.schema)() else {
                unreachable!("a schema of an argument struct is an object")
            };
            Tool::new(s.name, s.description, Arc::new(input)).annotate(annotations)
        })
        .collect()
}

/// The arguments as the tool's struct; a clear `invalid_argument` naming the tool otherwise.
fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T> {
    serde_json::from_value(args).map_err(|e| {
        Error::invalid(format!(
            "bad arguments for {tool}: {e}; see the tool's input schema (tools/list)"
        ))
    })
}

pub async fn dispatch(call: &Call, name: &str, args: Value) -> Result<Reply> {
    match name {
        "machine_list" => machine::list(call, parse(name, args)?).await,
        "session_create" => session::create(call, parse(name, args)?).await,
        "session_list" => session::list(call, parse(name, args)?).await,
        "session_read" => session::read(call, parse(name, args)?).await,
        "session_destroy" => session::destroy(call, parse(name, args)?).await,
        "session_exec" => command::exec(call, parse(name, args)?).await,
        "command_wait" => command::wait(call, parse(name, args)?).await,
        "command_stop" => command::stop(call, parse(name, args)?).await,
        "session_send" => send::send(call, parse(name, args)?).await,
        "file_read" => file::read(call, parse(name, args)?).await,
        "file_write" => file::write(call, parse(name, args)?).await,
        "file_put" => file::transfer(call, parse(name, args)?, true).await,
        "file_get" => file::transfer(call, parse(name, args)?, false).await,
        "run_once" => run::once(call, parse(name, args)?).await,
        "code_run" => run::code(call, parse(name, args)?).await,
        _ => Err(Error::internal(format!("tool {name} has no handler"))),
    }
}
