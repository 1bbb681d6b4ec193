//! Pipelines: a declarative graph of supervised steps with human gates (`monitor pipeline`).
//! `file` reads and checks a pipeline file; `engine` is the pure state machine that says,
//! from the steps' states and one outcome, what happens next.

pub mod engine;
pub mod file;
pub mod run;

#[cfg(test)]
mod tests;
