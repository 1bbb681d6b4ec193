//! The Debian package (`scripts/package`), installed by dpkg into a clean Debian root
//! (debootstrap's minbase with systemd, copied fresh for the test): its files are where
//! Debian looks for them, its postinst made the service's user, systemd accepts its units
//! (`systemd-analyze verify`, inside that root), the demo it ships runs there from start to
//! end with the installed binaries, and removing it leaves the state.
//!
//! Everything inside the root runs in a mount namespace of its own (`unshare`), where
//! `/proc` and `/dev` are mounted for it: nothing is ever mounted under the test's
//! directory in the host's namespace, so removing it cannot reach the host's `/dev`.

use headless_run_e2e::*;
use std::path::Path;
use std::time::Duration;

/// The .deb of the static release binaries (`scripts/package`), in the test's dir.
pub(crate) fn build_package(env: &TestEnv) -> std::path::PathBuf {
    let out = env
        .command("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/package"))
        .arg("--from")
        .arg(release_dir())
        .arg("--out")
        .arg(env.path().join("deb"))
        .timeout(Duration::from_secs(300))
        .run();
    out.expect_code(0);
    let deb = std::path::PathBuf::from(out.out().trim());
    assert!(
        deb.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("headless-run_")),
        "{}",
        out.context()
    );
    deb
}

/// Runs `script` with `sh` inside `root`, with a clean environment.
fn in_root(env: &TestEnv, root: &Path, script: &str) -> Outcome {
    let vars = [
        ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        ("HOME", "/root"),
        ("TERM", "dumb"),
        ("LANG", "C.UTF-8"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    chrooted(env, root, &vars, &["/bin/sh", "-c", script])
}

#[test]
fn the_package_installs_in_a_clean_debian_root_and_its_demo_runs_there() {
    if !running_as_root("the_package_installs_in_a_clean_debian_root") {
        return;
    }
    need("dpkg-deb", "dpkg");
    need("unshare", "util-linux");
    let env = TestEnv::new();
    // The package, of the static release binaries.
    let deb = build_package(&env);

    // A clean root of its own.
    let root = env.path().join("root");
    let copied = env
        .command("cp")
        .arg("-a")
        .arg(debian_root())
        .arg(&root)
        .timeout(Duration::from_secs(300))
        .run();
    copied.expect_code(0);
    std::fs::copy(&deb, root.join("tmp/headless-run.deb")).unwrap();

    let installed = in_root(&env, &root, "dpkg -i /tmp/headless-run.deb");
    installed.expect_code(0);
    for file in [
        "usr/bin/headless-run",
        "usr/bin/monitor",
        "usr/share/man/man1/monitor-serve.1.gz",
        "usr/share/bash-completion/completions/monitor",
        "usr/share/zsh/vendor-completions/_headless-run",
        "usr/share/fish/vendor_completions.d/monitor.fish",
        "usr/lib/systemd/system/monitor-serve.service",
        "usr/lib/systemd/user/monitor-worker.service",
        "usr/lib/sysusers.d/headless-run.conf",
        "usr/share/doc/headless-run/copyright",
    ] {
        assert!(root.join(file).exists(), "{file} is not installed");
    }
    // The postinst made the service's user, with no shell and its state dir as home.
    let user = in_root(&env, &root, "getent passwd headless-run");
    user.expect_code(0);
    assert!(
        user.out().contains(":/var/lib/headless-run:"),
        "{}",
        user.context()
    );
    // Both units, as that root's systemd reads them: no error, no warning.
    let verified = in_root(
        &env,
        &root,
        "systemd-analyze verify --man=no /usr/lib/systemd/system/monitor-serve.service && \
         mkdir -p /tmp/rt && XDG_RUNTIME_DIR=/tmp/rt systemd-analyze verify --user --man=no \
         /usr/lib/systemd/user/monitor-worker.service",
    );
    verified.expect_code(0);
    assert_eq!(verified.stderr.trim(), "", "{}", verified.context());

    // The demo the package ships, with the installed binaries, in the root.
    let demo = in_root(
        &env,
        &root,
        "cd /tmp && /usr/share/doc/headless-run/examples/demo",
    );
    demo.expect_code(0);
    for step in [
        "(exit 90)",
        "resumed as TR-",
        "notes.txt is gone",
        "all checks passed",
        "binaries: /usr/bin;",
    ] {
        assert!(demo.out().contains(step), "{step}: {}", demo.context());
    }

    // Removed, it leaves no binary and keeps the state it made.
    in_root(
        &env,
        &root,
        "mkdir -p /var/lib/headless-run && touch /var/lib/headless-run/kept",
    )
    .expect_code(0);
    in_root(&env, &root, "dpkg -r headless-run").expect_code(0);
    assert!(!root.join("usr/bin/monitor").exists());
    assert!(root.join("var/lib/headless-run/kept").exists());
}

/// The container image of `monitor serve` (`scripts/container`, buildah, offline from the
/// workspace, of the static release build): its configuration says what the
/// Containerfile says, and a container of it serves `/healthz` and refuses a request
/// without a token, as the unprivileged user, with its state in the image's state dir.
#[test]
fn the_container_image_builds_offline_and_serves() {
    if !running_as_root("the_container_image_builds_offline_and_serves") {
        return;
    }
    need("buildah", "buildah");
    let env = TestEnv::new();
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let tag = format!("localhost/headless-run-serve-test:{}", std::process::id());
    // Its own storage: nothing of the host's images is touched, and it goes with the test.
    let storage = env.path().join("storage");
    let buildah = |args: &[&str]| {
        env.command("buildah")
            .arg("--root")
            .arg(&storage)
            .arg("--runroot")
            .arg(env.path().join("runroot"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .timeout(Duration::from_secs(600))
            .run()
    };
    let built = env
        .command("bash")
        .arg(scripts.join("container"))
        .arg("--from")
        .arg(release_dir())
        .args(["--tag", &tag])
        .env("STORAGE_DRIVER", "vfs")
        .env(
            "CONTAINERS_STORAGE_CONF",
            write_storage_conf(&env, &storage),
        )
        .timeout(Duration::from_secs(1800))
        .run();
    built.expect_code(0);
    assert_eq!(built.out().trim(), tag, "{}", built.context());

    let inspected = buildah(&["inspect", "--type", "image", &tag]);
    inspected.expect_code(0);
    let config: serde_json::Value = serde_json::from_str(&inspected.out()).unwrap();
    let oci = &config["OCIv1"]["config"];
    assert_eq!(oci["User"], "65532:65532", "{oci}");
    assert_eq!(oci["Entrypoint"][0], "/usr/bin/monitor", "{oci}");
    assert!(
        oci["Env"]
            .as_array()
            .unwrap()
            .contains(&"HEADLESS_RUN_HOME=/var/lib/headless-run".into()),
        "{oci}"
    );

    // A container of it, serving on loopback (the host's network, chroot isolation).
    let port = hr_shared::testing::pg::free_port();
    let ctr = buildah(&["from", &tag]);
    ctr.expect_code(0);
    let ctr = ctr.out().trim().to_owned();
    // A token made in the container's own state dir, as its user (the state dir must be
    // that user's and private, or `monitor` refuses it).
    let made = buildah(&[
        "run",
        "--isolation",
        "chroot",
        &ctr,
        "--",
        "/usr/bin/monitor",
        "token",
        "create",
        "wall",
        "--role",
        "viewer",
    ]);
    made.expect_code(0);
    let viewer = made
        .out()
        .split_whitespace()
        .find(|w| w.starts_with("hrt_"))
        .unwrap_or_else(|| panic!("no token: {}", made.context()))
        .to_owned();
    let listen = format!("127.0.0.1:{port}");
    let server = env
        .command("buildah")
        .arg("--root")
        .arg(&storage)
        .arg("--runroot")
        .arg(env.path().join("runroot"))
        .args(["--storage-driver", "vfs", "run", "--isolation", "chroot"])
        .args([&ctr, "--", "/usr/bin/monitor", "serve", "--listen", &listen])
        .timeout(Duration::from_secs(120))
        .spawn();
    let healthz = wait_for_http(port, "/healthz");
    let (status, _) = http_get(port, "/api/v1/runs", None);
    let (with_token, listed) = http_get(port, "/api/v1/runs", Some(&viewer));
    server.signal(libc::SIGTERM);
    let out = server.wait();
    buildah(&["rm", &ctr]).expect_code(0);
    buildah(&["rmi", &tag]).expect_code(0);
    assert_eq!(healthz, "ok\n", "{}", out.context());
    assert_eq!(status, 401, "{}", out.context());
    assert_eq!(with_token, 200, "{listed} {}", out.context());
    assert!(listed.contains("\"runs\""), "{listed}");
}

/// A containers-storage.conf that keeps buildah's images under `storage`.
fn write_storage_conf(env: &TestEnv, storage: &Path) -> std::path::PathBuf {
    let conf = env.path().join("storage.conf");
    std::fs::write(
        &conf,
        format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            storage.display(),
            env.path().join("runroot").display()
        ),
    )
    .unwrap();
    conf
}

/// GET `path` on loopback (with a bearer token): the status and body.
fn http_get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// The body of `path` once the server answers it with 200 (within a minute).
fn wait_for_http(port: u16, path: &str) -> String {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = http_get(port, path, None);
        if status == 200 || std::time::Instant::now() > end {
            return body;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
