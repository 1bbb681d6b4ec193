//! Pipelines: a declarative graph of supervised steps with human gates (`monitor pipeline`).
//! `file` reads and checks a pipeline file; `engine` is the pure state machine that says,
//! from the steps' states and one outcome, what happens next.

pub mod run;

pub use hr_shared::pipeline::{engine, file};

#[cfg(test)]
mod tests;
