//! The store contract suite: the same cases (`contract/`) against every store
//! implementation. Today the embedded SQLite store; a PostgreSQL store and an HTTP runner
//! store plug in with a factory of their own (see `contract::StoreUnderTest`) and one
//! `contract_tests!` line, and must pass unchanged.
//!
//! ```sh
//! cargo test -p headless-run-shared --test store_contract
//! ```

#[macro_use]
mod contract;

use contract::StoreUnderTest;
use hr_shared::paths::StatePaths;
use hr_shared::store::{self, OperatorStore, RunnerStore};

/// The embedded SQLite store: a state dir in a temp dir, sessions made the way the shim
/// (`store::runner`) and `monitor` (`store::operator`) make theirs.
struct Sqlite {
    dir: tempfile::TempDir,
    paths: StatePaths,
}

impl StoreUnderTest for Sqlite {
    fn fresh() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths = StatePaths::at(dir.path().join("state"));
        // The first shim creates the database; `monitor` needs it to exist.
        store::runner(&paths).connect().expect("create the store");
        Sqlite { dir, paths }
    }

    fn runner(&self) -> Box<dyn RunnerStore> {
        store::runner(&self.paths)
    }

    fn operator(&self) -> Box<dyn OperatorStore> {
        store::operator(&self.paths)
    }

    fn absent_operator(&self) -> Box<dyn OperatorStore> {
        store::operator(&StatePaths::at(self.dir.path().join("never-created")))
    }

    fn replace_with_empty(&self) -> bool {
        // Deleted under the open sessions (they keep the old file open), then created anew.
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.paths.db.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
        store::runner(&self.paths)
            .connect()
            .expect("create the new store");
        true
    }
}

contract_tests!(sqlite, Sqlite);
