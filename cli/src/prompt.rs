//! Interactive questions for a person at a terminal. Prompts go to stderr (so `--json` stdout
//! stays one object); passwords are read without echo through the terminal.

use std::io::{BufRead, IsTerminal, Read, Write};

use remote_runner_engine::secret::Secret;
use remote_runner_engine::{Error, Result};

/// Asks questions only when stdin is a terminal and the user did not pass `--no-input`.
#[derive(Debug, Clone, Copy)]
pub struct Prompter {
    pub interactive: bool,
}

impl Prompter {
    pub fn detect(no_input: bool) -> Prompter {
        Prompter {
            interactive: !no_input && std::io::stdin().is_terminal(),
        }
    }

    /// Ask for one line; an empty answer takes `default` when there is one, else asks again.
    pub fn ask(&self, label: &str, default: Option<&str>) -> Result<String> {
        loop {
            let answer = self.ask_optional(label, default)?;
            if let Some(answer) = answer {
                return Ok(answer);
            }
            eprintln!("  a value is required");
        }
    }

    /// Ask for one line; an empty answer is `default`, or `None` without one.
    pub fn ask_optional(&self, label: &str, default: Option<&str>) -> Result<Option<String>> {
        let prompt = match default {
            Some(d) => format!("{label} [{d}]: "),
            None => format!("{label}: "),
        };
        let line = read_line(&prompt)?;
        let line = line.trim();
        Ok(if line.is_empty() {
            default.map(str::to_string)
        } else {
            Some(line.to_string())
        })
    }

    /// Ask for lines until an empty one.
    pub fn ask_lines(&self, label: &str) -> Result<Vec<String>> {
        eprintln!("{label} (one per line, empty line to finish):");
        let mut lines = Vec::new();
        loop {
            let line = read_line("  > ")?;
            let line = line.trim_end_matches(['\r', '\n']);
            if line.trim().is_empty() {
                return Ok(lines);
            }
            lines.push(line.to_string());
        }
    }

    /// Ask for a password without echo (through the terminal, never stdout).
    pub fn ask_password(&self, label: &str) -> Result<Secret> {
        loop {
            let value = rpassword::prompt_password(format!("{label}: "))
                .map_err(|e| Error::io("cannot read the password from the terminal", &e))?;
            if !value.is_empty() {
                return Ok(Secret::new(value));
            }
            eprintln!("  the password cannot be empty");
        }
    }
}

fn read_line(prompt: &str) -> Result<String> {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(prompt.as_bytes());
    let _ = stderr.flush();
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Error::io("cannot read an answer from stdin", &e))?;
    if n == 0 {
        return Err(Error::invalid(
            "input ended before every question was answered; pass the values as flags instead \
             (see --help)",
        ));
    }
    Ok(line)
}

/// Read a password piped on stdin (`--password-stdin`): everything up to EOF, without the
/// trailing newline. The io error is described by kind only, so no input byte is echoed.
pub fn password_from_stdin() -> Result<Secret> {
    let mut raw = String::new();
    std::io::stdin()
        .lock()
        .read_to_string(&mut raw)
        .map_err(|e| {
            Error::invalid(format!(
                "--password-stdin could not read stdin ({}); pipe the password as UTF-8 text",
                e.kind()
            ))
        })?;
    let value = raw.strip_suffix('\n').unwrap_or(&raw);
    let value = value.strip_suffix('\r').unwrap_or(value);
    if value.is_empty() {
        return Err(Error::invalid(
            "--password-stdin read an empty password; pipe the password in, for example: \
             remote-runner machine add ID ... --auth password --password-stdin < password-file",
        ));
    }
    Ok(Secret::new(value))
}
