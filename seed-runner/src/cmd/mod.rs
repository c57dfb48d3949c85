//! The v3 commands, one file each (`status`, `mount create|status|destroy`, `session
//! create|exec|status|destroy`). Each has `run`, which answers with the command's JSON object;
//! what several share lives in the modules beside `cmd/`.

pub mod mount_create;
pub mod mount_destroy;
pub mod mount_status;
pub mod session_create;
pub mod session_destroy;
pub mod session_exec;
pub mod session_status;
pub mod status;
