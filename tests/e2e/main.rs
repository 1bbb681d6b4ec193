//! End-to-end tests: the real `headless-run` and `monitor` binaries, in real ptys, against
//! fixture tools that prompt, hang, stall, crash, flood output and lie. Build the binaries
//! first (`cargo build --workspace`). Each module says what it covers.

mod dashboard;
mod passthrough;
mod records;
mod stdin;
mod store_faults;
mod supervision;
mod symlink;
