//! `remote-runner mcp`: the engine as a Model Context Protocol server on stdio.
//!
//! One process serves one client for as long as it runs, over the same state dir, machines and
//! sessions as the CLI, with one engine for every call (warm connections: a `session_exec` of
//! `true` costs a round trip, not a process start). Each tool calls what the matching CLI
//! command calls and returns the JSON that command's `--json` prints as `structuredContent`,
//! with a short summary plus the output an agent needs as text. One file per tool group:
//! `machine`, `session`, `command` (exec, wait, stop), `send`, `file`, `run` (run once, code run);
//! `resources` serves transcripts and command logs; `reply` builds results and errors.
//!
//! What the server may touch is configured here, never asked of the model: `--machine`
//! (repeatable) limits it to those machines, `--read-only` to the reading tools, `--root`
//! (repeatable) to local files beneath those directories (`local`), and no tool adds machines or
//! credentials.

mod command;
mod file;
mod input;
mod local;
mod machine;
mod reply;
mod resources;
mod run;
mod send;
mod session;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use remote_runner_engine::engine::EngineOptions;
use remote_runner_engine::{Error, ErrorCode, Result};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::output::{Output, Report};
use reply::Reply;

pub const EXAMPLES: &str = "\
Examples:
  remote-runner mcp                                  # every configured machine, every tool
  remote-runner mcp --machine lab-gpu-01 --machine local
  remote-runner mcp --read-only --max-output-bytes 16384
  remote-runner mcp --root ~/project --root ~/datasets     # local files only beneath these
  # Claude Code: claude mcp add remote-runner -- remote-runner mcp
See docs/mcp.md for other clients and every tool.";

/// Most tool calls served at once; past it a call is answered `busy` at once. With the bound on
/// one request ([`input::MAX_LINE`], [`input::MAX_VALUES`]) it bounds the memory of the
/// requests in flight. Room for an agent driving 20 sessions at once (the crowd test) and more.
pub const MAX_CALLS_IN_FLIGHT: usize = 32;

/// Default bound on how much of each of stdout and stderr one tool result carries.
pub const DEFAULT_MAX_OUTPUT: usize = 64 * 1024;

/// Without `timeout_s`, how long `session_exec` and `command_wait` wait before returning
/// `status: running` with the command id (many clients give up on a tool call after a minute
/// or two; the command goes on either way).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve only this machine (repeat for more) [default: every configured machine]
    #[arg(long = "machine", value_name = "MACHINE_ID")]
    pub machines: Vec<String>,
    /// List and allow only the tools that read (machine_list, session_list, session_read,
    /// command_wait, file_read)
    #[arg(long)]
    pub read_only: bool,
    /// Most bytes of each of stdout and stderr in one tool result (head and tail kept, the middle
    /// elided with a note saying how to read it all); also the largest file_read and session_read
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_OUTPUT as u64, value_parser = clap::value_parser!(u64).range(1024..=(16 << 20)))]
    pub max_output_bytes: u64,
    /// A directory whose files file_put, file_get and run_once may read and write on this host
    /// (repeat for more; relative local paths are taken from the first). Nothing outside the
    /// roots is reachable, through `..` or symlinks either; the state dir, machines' keys and
    /// known_hosts files and ~/.ssh never are. A root may not be /, a home directory or one of
    /// its ancestors [default: the directory the server starts in, unless it is one of those;
    /// then the local file tools are refused]
    #[arg(long = "root", value_name = "DIR")]
    pub roots: Vec<std::path::PathBuf>,
}

/// Serve MCP on stdin/stdout until the client closes stdin.
pub async fn run(ctx: &Context, args: McpArgs) -> Result<Report> {
    let max_output = args.max_output_bytes as usize;
    // Long-lived: commands are typed through kept tmux control clients, on connections of
    // its own.
    let options = EngineOptions {
        excerpt_bytes: max_output,
        terminal_clients: true,
        ..EngineOptions::default()
    };
    let wired = Arc::new(ctx.engine_holding_connections(options)?);
    for id in &args.machines {
        // An unknown id is a configuration mistake: say so before serving anything.
        wired.machine(id)?;
    }
    let roots = local::Roots::choose(&args.roots, &ctx.state_dir)?;
    let server = Server {
        state: Arc::new(State {
            roots,
            state_dir: ctx.state_dir.clone(),
            wired,
            machines: args.machines,
            read_only: args.read_only,
            max_output,
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_CALLS_IN_FLIGHT)),
        }),
    };
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let running = server
        .serve((input::CheckedInput::new(stdin), stdout))
        .await
        .map_err(|e| Error::internal(format!("the MCP handshake failed: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| Error::internal(format!("the MCP server stopped: {e}")))?;
    // stdout belongs to the protocol: nothing more is printed when the client goes.
    std::process::exit(0);
}

/// What every call shares: the engine and the configured scope.
#[derive(Debug)]
pub struct State {
    /// Where the local file tools may reach on this host.
    roots: local::Roots,
    state_dir: std::path::PathBuf,
    wired: Arc<crate::context::Wired>,
    machines: Vec<String>,
    read_only: bool,
    max_output: usize,
    /// One permit per tool call being served.
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl State {
    /// A CLI context for one call: JSON output, the shared engine, `timeout` as `--timeout`.
    fn context(&self, timeout: Option<Duration>) -> Context {
        Context {
            state_dir: self.state_dir.clone(),
            timeout,
            timeout_scope: crate::timeout::Scope::Own,
            out: Output::new(true, crate::output::ColorMode::Never),
            shared: Some(self.wired.clone()),
        }
    }

    fn engine(&self) -> &remote_runner_engine::engine::Engine {
        &self.wired.engine
    }

    fn machine_allowed(&self, machine_id: &str) -> bool {
        self.machines.is_empty() || self.machines.iter().any(|m| m == machine_id)
    }

    /// Refuse a machine outside `--machine`.
    fn check_machine(&self, machine_id: &str) -> Result<()> {
        if self.machine_allowed(machine_id) {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::PermissionDenied,
            format!(
                "machine {machine_id} is not served here: this MCP server was started with \
                 --machine {}; use one of those machines or ask for the server's configuration \
                 to be changed",
                self.machines.join(" --machine ")
            ),
        )
        .retryable(false))
    }

    /// Refuse a session on a machine outside `--machine` (`unknown_session` when there is none).
    fn check_session(&self, session_id: &str) -> Result<()> {
        if self.machines.is_empty() {
            return Ok(());
        }
        let rec = self.engine().session_show(session_id)?;
        self.check_machine(&rec.machine_id)
    }
}

/// Run a CLI handler whose future the compiler cannot prove `Send` (the transfers' tree walks)
/// on a blocking thread of its own, driven by the runtime's handle.
async fn on_own_thread<T, F>(make: impl FnOnce() -> F + Send + 'static) -> Result<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T>>,
{
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || handle.block_on(make()))
        .await
        .map_err(|e| Error::internal(format!("a tool call's thread failed: {e}")))?
}

/// One tool call: the shared state, the client's progress token and the cancellation.
pub struct Call {
    state: Arc<State>,
    progress: Option<(ProgressToken, rmcp::Peer<RoleServer>)>,
    cancel: CancellationToken,
}

impl Call {
    /// Send a progress notification when the client asked for them (errors are the client's
    /// loss: the call goes on).
    async fn progress(&self, progress: f64, message: String) {
        if let Some((token, peer)) = &self.progress {
            let note =
                ProgressNotificationParam::new(token.clone(), progress).with_message(message);
            let _ = peer.notify_progress(note).await;
        }
    }
}

#[derive(Debug, Clone)]
pub struct Server {
    state: Arc<State>,
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        );
        info.server_info.name = "remote-runner".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        info.with_instructions(tools::instructions(&self.state.machines))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::list(
            self.state.read_only,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let Some(spec) = tools::find(&name) else {
            return Ok(Reply::error(&Error::invalid(format!(
                "there is no tool named {name:?}; list the tools (tools/list) for their names"
            )))
            .into_result()
            .into());
        };
        if self.state.read_only && !spec.read_only {
            let err = Error::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{name} changes things, and this MCP server was started with --read-only; \
                     only the reading tools can be called"
                ),
            )
            .retryable(false);
            return Ok(Reply::error(&err).into_result().into());
        }
        let Ok(_permit) = self.state.in_flight.clone().try_acquire_owned() else {
            let err = Error::new(
                ErrorCode::Busy,
                format!(
                    "this MCP server is already serving {MAX_CALLS_IN_FLIGHT} tool calls, its \
                     bound; wait for one of them to return and call {name} again"
                ),
            )
            .retryable(true);
            return Ok(Reply::error(&err).into_result().into());
        };
        let call = Call {
            state: self.state.clone(),
            progress: context
                .meta
                .get_progress_token()
                .map(|t| (t, context.peer.clone())),
            cancel: context.ct.clone(),
        };
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let reply = tools::dispatch(&call, &name, args)
            .await
            .unwrap_or_else(|e| Reply::error(&e));
        Ok(reply.into_result().into())
    }

    /// A request the input refused before parsing it (see `input`): its JSON-RPC error.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CustomResult, McpError> {
        let refusal = (request.method == input::REFUSED_METHOD)
            .then(|| request.params.as_ref()?.get("reason")?.as_str())
            .flatten()
            .and_then(input::Refusal::from_code);
        match refusal {
            Some(why) => Err(McpError::invalid_request(
                why.message(),
                Some(serde_json::json!({"code": why.code()})),
            )),
            None => Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("there is no method {:?}", request.method),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourcesResult, McpError> {
        resources::list(&self.state)
            .map_err(|e| McpError::internal_error(reply::error_text(&e), None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourceTemplatesResult, McpError> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ReadResourceResponse, McpError> {
        resources::read(&self.state, &request.uri)
            .await
            .map(Into::into)
    }
}
