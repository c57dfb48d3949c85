//! `completions` and the hidden `man`: generated from the clap definitions, so they never drift.

use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::Shell;
use remote_runner_engine::{Error, Result};
use serde_json::json;

use crate::cli::Cli;
use crate::output::{Block, Report};

pub const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  remote-runner completions bash > ~/.local/share/bash-completion/completions/remote-runner
  remote-runner completions zsh > ~/.zfunc/_remote-runner
  remote-runner completions fish > ~/.config/fish/completions/remote-runner.fish";

pub const MAN_EXAMPLES: &str = "\
Examples:
  remote-runner man > remote-runner.1
  remote-runner man --out-dir ./man    # one page per command";

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to generate for
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write one page per command into this directory instead of printing the main page
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// The script goes to stdout as is; with `--json` it is the `script` field.
pub fn completions(args: &CompletionsArgs) -> Result<Report> {
    let mut cmd = crate::timeout::annotate(Cli::command());
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "remote-runner", &mut buf);
    let script = String::from_utf8_lossy(&buf).into_owned();
    Ok(
        Report::new(json!({ "shell": args.shell.to_string(), "script": script }))
            .human(vec![Block::Raw(script)]),
    )
}

pub fn man(args: &ManArgs) -> Result<Report> {
    let cmd = crate::timeout::annotate(Cli::command());
    match &args.out_dir {
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .map_err(|e| Error::io("cannot render the man page", &e))?;
            let page = String::from_utf8_lossy(&buf).into_owned();
            Ok(Report::new(json!({ "page": page })).human(vec![Block::Raw(page)]))
        }
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("cannot create {}", dir.display()), &e))?;
            clap_mangen::generate_to(cmd, dir).map_err(|e| {
                Error::io(format!("cannot write man pages to {}", dir.display()), &e)
            })?;
            let mut files: Vec<String> = std::fs::read_dir(dir)
                .map_err(|e| Error::io(format!("cannot list {}", dir.display()), &e))?
                .filter_map(|e| e.ok())
                .map(|e| e.path().display().to_string())
                .filter(|p| p.ends_with(".1"))
                .collect();
            files.sort();
            let lines = files
                .iter()
                .map(|f| Block::Line(crate::output::Cell::plain(f.clone())));
            Ok(
                Report::new(json!({ "out_dir": dir.display().to_string(), "files": files }))
                    .human(lines.collect()),
            )
        }
    }
}
