//! End-to-end tests: the real `headless-run` and `monitor` binaries, in real ptys, against
//! fixture tools that prompt, hang, stall, crash, flood output and lie. Build the binaries
//! first (`cargo build --workspace`). Each module says what it covers.

mod agents;
mod approval_flow;
mod cancel;
mod ci_guide;
mod config;
mod conventions;
mod dashboard;
mod decide;
mod demo;
mod doctor;
mod events;
mod faults;
mod gc;
mod hostile;
mod identity;
mod install;
mod libraries;
mod listing;
mod logs;
mod matrix;
mod not_prompts;
mod operator;
mod passthrough;
mod pipelines;
mod postgres;
mod prompts;
mod reconcile;
mod records;
mod remote;
mod reports;
mod restart;
mod resume;
mod rows;
mod runner_api;
mod security;
mod serve;
mod serve_hostile;
mod stdin;
mod store_faults;
mod stress;
mod supervision;
mod symlink;
mod terminal;
mod wait;
