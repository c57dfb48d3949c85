//! remote-runner-conformance: plays the BotMux host against any remote-runner provider and
//! checks every rule the host enforces, scenario by scenario. The same provider process also
//! has a blocking face, [`script::ScriptHost`]: the one scripted host the workspace's tests and
//! tools drive a provider with.
//!
//! ```no_run
//! # async fn demo() {
//! use remote_runner_conformance::{Config, run, select};
//! let config = Config::new(vec!["./my-provider".into()]);
//! let scenarios = select(&config).expect("known groups and scenarios");
//! let report = run(&config, scenarios).await;
//! println!("{}", report.to_text());
//! assert!(report.success());
//! # }
//! ```

pub mod cli;
pub mod config;
pub mod host;
pub mod process;
pub mod report;
pub mod runner;
pub mod scenarios;
pub mod script;
pub mod track;
pub mod violation;

pub use config::Config;
pub use report::{Outcome, Report, ScenarioReport};
pub use runner::{run, select};
pub use violation::{Violation, Warning, rule};
