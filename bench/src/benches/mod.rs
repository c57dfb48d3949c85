//! One module per benchmark (or pair of benchmarks sharing a setup).

pub mod chats;
pub mod code_binding;
pub mod exec_cold;
pub mod exec_warm;
pub mod file;
pub mod mcp;
pub mod seed_loop;
pub mod tree;
pub mod turn;
