//! Replaying the spool into the embedded store: final rows earlier shims could not write
//! (`crate::spool` keeps them on disk).

use crate::db::{self, Result};
use crate::paths::StatePaths;
use crate::rules::VANISHED;
use crate::runs::{Guard, StatusChange, Touch};
use crate::spool::*;
use crate::status::RunStatus;
use rusqlite::Connection;

/// Writes every spooled run into the database and removes its file; returns their ids. A
/// row that already ended by itself is left as it is; one still live, or failed only because
/// its shim seemed to vanish, takes the spooled final state. Unreadable files are left for a
/// person to look at.
pub(crate) fn replay(
    conn: &mut Connection,
    paths: &StatePaths,
    actor: &str,
    identity: &str,
) -> Result<Vec<String>> {
    let mut done = Vec::new();
    for (path, run) in spooled(paths) {
        db::write(conn, |tx| {
            match crate::store::sqlite::runs::get(tx, &run.tool_run_id)? {
                // Spooled by this user's own shims (the spool dirs are checked to be ours).
                None => crate::store::sqlite::runs::insert(
                    tx,
                    &run.stamped(identity, Some(crate::proc::effective_uid())),
                    actor,
                )?,
                Some(current) => {
                    let vanished = current.status == RunStatus::Failed
                        && current
                            .reason
                            .as_deref()
                            .is_some_and(|r| r.starts_with(VANISHED));
                    if !current.status.is_final() || vanished {
                        let change = StatusChange {
                            status: run.status,
                            reason: run.reason.clone(),
                            exit_code: run.exit_code,
                            finished: run.completed_at.is_some(),
                            error: run.last_error_msg.clone(),
                            at: run.completed_at.clone(),
                        };
                        crate::store::sqlite::runs::change_status(
                            tx,
                            &run.tool_run_id,
                            &change,
                            actor,
                            Guard::Any,
                        )?;
                        crate::store::sqlite::runs::touch(
                            tx,
                            &run.tool_run_id,
                            &Touch {
                                last_output_at: run.last_output_at.clone(),
                                last_heartbeat_at: run.last_heartbeat_at.clone(),
                                supervisor_heartbeat_at: None,
                                last_error_msg: run.last_error_msg.clone(),
                            },
                        )?;
                    }
                }
            }
            Ok(())
        })?;
        let _ = std::fs::remove_file(&path);
        done.push(run.tool_run_id);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::OpenMode;
    use crate::testing::run as sample;

    #[test]
    fn spooled_rows_land_once_and_do_not_undo_a_later_end() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = StatePaths {
            root: tmp.path().to_path_buf(),
            db: tmp.path().join("state.db"),
            store_url: None,
            listen_url: None,
            server: None,
        };
        let mut conn = db::open(&paths.db, OpenMode::Create).unwrap();
        // A run whose row never landed at all, one that did (still running), one that was
        // reconciled as vanished, and one cancelled meanwhile.
        let mut missing = sample("TR-MISSING", "x", RunStatus::Completed);
        missing.completed_at = Some("2026-11-22T10:00:00.000Z".into());
        missing.exit_code = Some(0);
        let mut live = sample("TR-LIVE", "x", RunStatus::Failed);
        live.exit_code = Some(7);
        live.reason = Some("exited with code 7".into());
        live.completed_at = Some("2026-11-22T10:00:01.000Z".into());
        let mut vanished = live.clone();
        vanished.tool_run_id = "TR-VANISHED".into();
        let mut cancelled = live.clone();
        cancelled.tool_run_id = "TR-CANCELLED".into();
        db::write(&mut conn, |tx| {
            crate::store::sqlite::runs::insert(
                tx,
                &sample("TR-LIVE", "x", RunStatus::Running),
                "t",
            )?;
            let mut v = sample("TR-VANISHED", "x", RunStatus::Failed);
            v.reason = Some(format!("{VANISHED} (pid 1 is not running)"));
            crate::store::sqlite::runs::insert(tx, &v, "t")?;
            let mut c = sample("TR-CANCELLED", "x", RunStatus::Cancelled);
            c.reason = Some("cancelled by alice".into());
            crate::store::sqlite::runs::insert(tx, &c, "t")
        })
        .unwrap();
        for r in [&missing, &live, &vanished, &cancelled] {
            write(&paths, r).unwrap();
        }
        let mut ids = replay(&mut conn, &paths, "replay", "me").unwrap();
        ids.sort();
        assert_eq!(ids.len(), 4);
        let get = |id: &str| crate::store::sqlite::runs::get(&conn, id).unwrap().unwrap();
        assert_eq!(get("TR-MISSING").status, RunStatus::Completed);
        assert_eq!(get("TR-LIVE").exit_code, Some(7));
        assert_eq!(
            get("TR-LIVE").completed_at.as_deref(),
            Some("2026-11-22T10:00:01.000Z")
        );
        assert_eq!(
            get("TR-VANISHED").reason.as_deref(),
            Some("exited with code 7")
        );
        assert_eq!(get("TR-CANCELLED").status, RunStatus::Cancelled);
        assert!(
            replay(&mut conn, &paths, "replay", "me")
                .unwrap()
                .is_empty()
        );
        assert!(crate::store::sqlite::audit::verify(&conn).unwrap().intact());
    }
}
