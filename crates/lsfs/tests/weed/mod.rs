//! A real S3 server on 127.0.0.1 for the tests that mount `s3://` URLs:
//! SeaweedFS's all-in-one `weed mini`, installed as `lsfs-weed` by
//! scripts/install-deps.sh. Each [`Weed`] runs its own server on ports
//! nobody else holds, with its data in a temporary directory, so tests may
//! run in parallel; it is killed and the directory removed when the
//! [`Weed`] is dropped, also when a test panics. Included with `mod weed;`
//! by each test that uses it.
//!
//! The server has one identity, with keys made up here, so lsfs signs its
//! requests as it would against any S3 store; [`Weed::apply`] gives a
//! command the same `AWS_` variables a user sets (docs/OBJECT_STORE.md).
#![allow(dead_code)]

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The binary scripts/install-deps.sh installs.
pub const WEED: &str = "lsfs-weed";
const KEY_ID: &str = "lsfs-test";
const SECRET: &str = "lsfs-test-secret";
const REGION: &str = "us-east-1";
/// How long a server may take to answer: about 5 s alone, more while
/// builds share the machine's 2 cores.
const START_SECS: u64 = 90;

/// The ports one server listens on: each component's HTTP port and its
/// gRPC port (weed's default for that is the HTTP port + 10000, which may
/// be taken or past 65535, so each is named).
#[derive(Clone, Copy, Debug)]
struct Ports {
    s3: u16,
    s3_grpc: u16,
    master: u16,
    master_grpc: u16,
    volume: u16,
    volume_grpc: u16,
    filer: u16,
    filer_grpc: u16,
    admin: u16,
    admin_grpc: u16,
}

impl Ports {
    /// Ports the kernel hands out as free now. Another process may take
    /// one before the server binds it: [`Weed::start`] then tries again.
    fn free() -> Ports {
        // Every port handed to a server of this test process: the kernel
        // may offer one again once its listener here is closed, before the
        // server that got it has bound it.
        static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        // All held open together, so that no two are the same.
        let mut held = Vec::new();
        let mut p = Vec::new();
        while p.len() < 10 {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind a port on 127.0.0.1");
            let port = l.local_addr().unwrap().port();
            if !given.contains(&port) {
                given.push(port);
                p.push(port);
            }
            held.push(l);
        }
        Ports {
            s3: p[0],
            s3_grpc: p[1],
            master: p[2],
            master_grpc: p[3],
            volume: p[4],
            volume_grpc: p[5],
            filer: p[6],
            filer_grpc: p[7],
            admin: p[8],
            admin_grpc: p[9],
        }
    }

    fn grpc(&self) -> [u16; 5] {
        [
            self.s3_grpc,
            self.master_grpc,
            self.volume_grpc,
            self.filer_grpc,
            self.admin_grpc,
        ]
    }
}

/// One `lsfs-weed mini` and its data directory.
pub struct Weed {
    // Field order is drop order, but Drop kills the child first anyway.
    child: Option<Child>,
    ports: Ports,
    /// The bucket made at start.
    pub bucket: String,
    dir: tempfile::TempDir,
}

impl Weed {
    /// Start a server in a fresh directory, wait until it answers, and make
    /// `bucket`. Panics, naming scripts/install-deps.sh, when `lsfs-weed`
    /// is not installed.
    pub fn start(bucket: &str) -> Weed {
        if Command::new(WEED)
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            panic!(
                "{WEED} not found on PATH: the s3:// tests run a SeaweedFS server; \
                 run scripts/install-deps.sh (as root) to build and install it"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("lsfs-weed")
            .tempdir_in("/var/tmp")
            .unwrap();
        fs::create_dir(dir.path().join("data")).unwrap();
        let mut w = Weed {
            child: None,
            ports: Ports::free(),
            bucket: bucket.to_string(),
            dir,
        };
        // A port taken between choosing it and the server binding it makes
        // the server exit: choose again.
        for attempt in 1..=3 {
            if w.run() {
                break;
            }
            assert!(attempt < 3, "{WEED} did not start:\n{}", w.log_tail());
            w.ports = Ports::free();
        }
        w.make_bucket();
        w
    }

    /// The S3 endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.s3)
    }

    /// `s3://BUCKET/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The server's data directory (kept across [`Weed::kill`] and
    /// [`Weed::restart`]).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The variables that point lsfs at this server, as a user would set
    /// them for any S3 store.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", REGION.into()),
            ("AWS_ACCESS_KEY_ID", KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
        ]
    }

    /// Point `cmd` at this server: the test's own `AWS_` variables (a
    /// developer's profile or temporary credentials) are taken away
    /// first, since lsfs reads every one of them.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("AWS_")) {
                cmd.env_remove(k);
            }
        }
        cmd.envs(self.env())
    }

    /// Kill the server (SIGKILL: as a crash, nothing shut down) and wait
    /// for it; its data stays for [`Weed::restart`].
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stop the server with SIGSTOP: its sockets stay open and take
    /// connections, but nothing answers (a hung server, not a dead one).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Let a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self.child.as_ref().expect("the server runs").id();
        // SAFETY: kill(2) on our own child, which has not been waited for,
        // so its pid is still its own.
        let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
        assert_eq!(r, 0, "signal {sig} to {WEED}");
    }

    /// Start the server again on the same directory and ports, and wait
    /// until it answers S3 requests.
    pub fn restart(&mut self) {
        self.kill();
        // The old sockets' ports may linger a moment; the server exits if
        // it cannot bind them, so try a few times.
        for attempt in 1..=5 {
            if self.run() {
                break;
            }
            assert!(
                attempt < 5,
                "{WEED} did not start again:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        // The bucket is there from before; wait until it answers again.
        self.make_bucket();
        // A master that restarts with volumes holds back new writes to
        // them for a warm-up (3 heartbeat pulses of 5 s, fixed in weed):
        // a PUT waits that long. Wait here, so that a mount's first
        // flush does not.
        self.put_probe();
    }

    /// Store a 64 KiB object (too big to be kept inline in the filer's
    /// metadata: it goes to a volume) under `.weed-probe` in the bucket:
    /// the server takes writes. Retried until it does.
    fn put_probe(&self) {
        let body = self.dir.path().join("probe");
        fs::write(&body, vec![7u8; 64 << 10]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(START_SECS);
        loop {
            let code = self.curl(&[
                "-X",
                "PUT",
                // curl signs no body; S3 then takes this header's word.
                "-H",
                "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                "--data-binary",
                &format!("@{}", body.display()),
                &format!("{}/{}/.weed-probe", self.endpoint(), self.bucket),
            ]);
            if code == "200" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "a PUT to {} answered {code:?} for {START_SECS} s:\n{}",
                self.bucket,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `curl ARGS` signed as this server's identity; the HTTP status.
    fn curl(&self, args: &[&str]) -> String {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg("--aws-sigv4")
            .arg(format!("aws:amz:{REGION}:s3"))
            .arg("--user")
            .arg(format!("{KEY_ID}:{SECRET}"))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run curl: {e}: see scripts/install-deps.sh"));
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Run the server and wait for its S3 port; false if it exited first.
    fn run(&mut self) -> bool {
        let p = self.ports;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("weed.log"))
            .unwrap();
        let mut cmd = Command::new(WEED);
        // glog writes its files to /tmp unless told: keep them with the run.
        cmd.arg(format!("-logdir={}", self.dir.path().display()))
            .arg("mini")
            .arg(format!("-dir={}", self.data_dir().display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .arg(format!("-s3.port={}", p.s3))
            .arg(format!("-s3.port.grpc={}", p.s3_grpc))
            .arg(format!("-master.port={}", p.master))
            .arg(format!("-master.port.grpc={}", p.master_grpc))
            .arg(format!("-volume.port={}", p.volume))
            .arg(format!("-volume.port.grpc={}", p.volume_grpc))
            .arg(format!("-filer.port={}", p.filer))
            .arg(format!("-filer.port.grpc={}", p.filer_grpc))
            .arg(format!("-admin.port={}", p.admin))
            .arg(format!("-admin.port.grpc={}", p.admin_grpc))
            // Sockets under /tmp named by port only: keep them in the
            // test's directory instead.
            .arg(format!(
                "-s3.localSocket={}",
                self.dir.path().join("s3.sock").display()
            ))
            .arg(format!(
                "-filer.localSocket={}",
                self.dir.path().join("filer.sock").display()
            ))
            // What the tests do not use listens on no port of its own, and
            // nothing reports to the internet.
            .args([
                "-webdav=false",
                "-admin.ui=false",
                "-admin.port.legacy=0",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.telemetry=false",
                // Small volumes: a test writes a few MiB.
                "-master.volumeSizeLimitMB=64",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // weed makes an identity from these keys at start (its "mini"
        // user), and only from the ones given here.
        for (k, _) in std::env::vars_os() {
            if k.to_str()
                .is_some_and(|k| k.starts_with("AWS_") || k.starts_with("S3_"))
            {
                cmd.env_remove(k);
            }
        }
        cmd.env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", SECRET);
        // SAFETY: prctl between fork and exec touches no memory of the
        // parent's; it kills the server if the test's thread dies without
        // dropping the Weed (the test binary killed).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("run {WEED}: {e}: see scripts/install-deps.sh"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(START_SECS);
        loop {
            if TcpStream::connect(("127.0.0.1", p.s3)).is_ok() {
                return true;
            }
            let c = self.child.as_mut().unwrap();
            if c.try_wait().unwrap().is_some() {
                self.child = None;
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "{WEED}'s S3 port {} not open within {START_SECS} s:\n{}",
                p.s3,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Create the bucket (a signed PUT, with curl's SigV4), or find it
    /// there; retried while the server's filer is still starting.
    fn make_bucket(&self) {
        let deadline = Instant::now() + Duration::from_secs(START_SECS);
        loop {
            let code = self.curl(&["-X", "PUT", &format!("{}/{}", self.endpoint(), self.bucket)]);
            // 409: the bucket was made before (a restart).
            if code == "200" || code == "409" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "making bucket {} answered {code:?} for {START_SECS} s:\n{}",
                self.bucket,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The end of the server's log, for a failure's message.
    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The directory the server's files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        // SIGKILL ends a stopped (paused) server too.
        self.kill();
        // Killed, weed leaves its gRPC sockets in /tmp, named by port.
        for port in self.ports.grpc() {
            for part in ["master", "volume", "filer", "admin", "s3"] {
                let _ = fs::remove_file(format!("/tmp/seaweedfs-{part}-grpc-{port}.sock"));
            }
        }
        // The TempDir goes after this, with the server's data.
    }
}
