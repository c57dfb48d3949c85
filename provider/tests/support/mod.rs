pub mod host;
pub mod pipes;
