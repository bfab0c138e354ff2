//! A one-shot boot of a project's VM: the same kernel, initramfs, userland
//! and disk as a served boot, but the guest's init runs one host program
//! as root instead of the server, hands back its output and exit status
//! over the control channel and powers off. It exists so that a test can
//! run on the guest's real environment (its kernel, its init's mounts and
//! cgroups, the project disk): strata-cli's `tests/microvm_contract.rs`
//! runs the Backend contract suite there (docs/microvm.md, "The contract
//! suite in the guest").
//!
//! The host puts the program and the files it names, stripped of debug
//! symbols, in the initramfs under `/strata/run/bin/`, and its argv and
//! environment in `/strata/run/spec.json`; the kernel starts
//! `/init __strata-vm-init run`. The guest's lines on the control channel:
//! `started`, then `out LINE` and `err LINE` as the program writes them,
//! `left PID CMDLINE` for each process still running after it ended (init
//! and kernel threads aside), then `exit N` or `signal N`; or
//! `error: WHY` if it could not start.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::accel::Accel;
use crate::boot::{boot, prepare_dir, CtlLines, Host};
use crate::guest::{self, GuestError};
use crate::initramfs::Extra;
use crate::vm::{stripped, tail, VmConfig};
use crate::VmError;

/// The init argument (after [`guest::INIT_ARG`]) of a one-shot boot.
pub const RUN_ARG: &str = "run";
/// Where the program and its files are in the guest.
pub const RUN_BIN: &str = "/strata/run/bin";
/// The program's argv and environment in the guest.
const SPEC_FILE: &str = "/strata/run/spec.json";
/// The program's PATH: the host's system directories, lent to the guest.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long the guest may take from the program's end to power-off
/// (sync, unmount the disk) before qemu is killed.
const POWER_OFF_WAIT: Duration = Duration::from_secs(60);

/// What a one-shot boot runs.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The program, a file on the host; it runs as root in the guest as
    /// `/strata/run/bin/NAME` (NAME its file name), cwd `/`, stdin empty.
    pub program: PathBuf,
    pub args: Vec<String>,
    /// More host files put beside it in `/strata/run/bin` (e.g. binaries
    /// it starts); file names must differ.
    pub files: Vec<PathBuf>,
    /// Environment beyond `PATH` (the host's system directories) and
    /// `HOME=/`.
    pub env: Vec<(String, String)>,
    /// From qemu's start to the program's end; qemu is killed after.
    pub timeout: Duration,
}

/// What the program did.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub stdout: String,
    pub stderr: String,
    /// Its exit code, or None when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub accel: Accel,
    /// From qemu's start to the program's start (the guest's boot).
    pub boot_ms: u64,
    /// The program's run.
    pub run_ms: u64,
    /// Processes of the guest still running 2 s after the program ended
    /// (`PID CMDLINE`; init and kernel threads aside): what the program
    /// left behind.
    pub left: Vec<String>,
    /// Whether the guest powered off by itself after the program.
    pub clean_power_off: bool,
    pub console: PathBuf,
}

impl RunOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

#[derive(Serialize, Deserialize)]
struct GuestSpec {
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

/// Boot the project's VM once to run `spec` in it; returns once qemu is
/// gone (powered off, or killed 60 s after the program ended). Refused, as a
/// served boot is, while another VM holds the disk (the project's VM
/// running included). A program that does not end within the timeout is
/// an error carrying its output so far; qemu is killed then too.
pub fn run(cfg: &VmConfig, spec: &RunSpec) -> Result<RunOutput, VmError> {
    let host = Host::find(cfg)?;
    let dir = prepare_dir(cfg)?;
    // The stripped copies live only until they are read into the
    // initramfs image (in memory here, then in initramfs.img).
    let scratch = dir.join("run");
    fs::create_dir_all(&scratch).map_err(crate::vm::io("create", &scratch))?;
    let mut extra = Vec::new();
    let mut names = Vec::new();
    for f in std::iter::once(&spec.program).chain(&spec.files) {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !names.contains(n))
            .ok_or_else(|| VmError::BadInput {
                what: "a one-shot run's files need distinct file names".into(),
                path: f.clone(),
            })?;
        if !f.is_file() {
            return Err(VmError::BadInput {
                what: "a one-shot run's file: no such file".into(),
                path: f.clone(),
            });
        }
        // Stripped afresh each run: the copy is named by the file's name
        // alone, and another file of that name (from another directory)
        // may be older than a copy a previous run left.
        let copy = scratch.join(&name);
        let _ = fs::remove_file(&copy);
        let small = stripped(f, &copy);
        let data = fs::read(&small).map_err(crate::vm::io("read", &small));
        let _ = fs::remove_file(&copy);
        let data = data?;
        extra.push(Extra {
            path: format!("{}/{name}", &RUN_BIN[1..]),
            mode: 0o755,
            data,
        });
        names.push(name);
    }
    let mut argv = vec![format!("{RUN_BIN}/{}", names[0])];
    argv.extend(spec.args.iter().cloned());
    let gspec = GuestSpec {
        argv,
        env: spec.env.clone(),
    };
    extra.push(Extra {
        path: SPEC_FILE[1..].to_string(),
        mode: 0o644,
        data: serde_json::to_vec(&gspec).unwrap_or_default(),
    });
    let mut b = boot(cfg, &host, Some(&extra))?;
    let mut out = RunOutput {
        stdout: String::new(),
        stderr: String::new(),
        code: None,
        signal: None,
        accel: b.verdict.accel,
        boot_ms: 0,
        run_ms: 0,
        left: Vec::new(),
        clean_power_off: false,
        console: b.console.clone(),
    };
    let collected = collect(&mut b, spec.timeout, &mut out);
    if let Err(reason) = collected {
        let _ = b.child.kill();
        let _ = b.child.wait();
        return Err(VmError::Run {
            project: cfg.project.clone(),
            reason,
            output: format!("{}{}", out.stdout, out.stderr),
            console: tail(&b.console, &b.qemu_log),
            log: b.console,
        });
    }
    let until = Instant::now() + POWER_OFF_WAIT;
    while Instant::now() < until {
        if let Ok(Some(_)) = b.child.try_wait() {
            out.clean_power_off = true;
            return Ok(out);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = b.child.kill();
    let _ = b.child.wait();
    Ok(out)
}

/// Read the guest's lines into `out` until the program's end.
fn collect(
    b: &mut crate::boot::Booted,
    timeout: Duration,
    out: &mut RunOutput,
) -> Result<(), String> {
    let mut lines = CtlLines::open(&b.ctl_out)?;
    let deadline = b.started + timeout;
    let mut started = None;
    loop {
        // Whether qemu has exited is read before the channel is drained:
        // everything it wrote before exiting is then in the FIFO, and the
        // last lines of a program that ends at once are not lost.
        let exited = b.child.try_wait().ok().flatten();
        while let Some(line) = lines.next_line() {
            let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            match word {
                "started" => {
                    out.boot_ms = b.started.elapsed().as_millis() as u64;
                    started = Some(Instant::now());
                }
                "out" => {
                    out.stdout.push_str(rest);
                    out.stdout.push('\n');
                }
                "err" => {
                    out.stderr.push_str(rest);
                    out.stderr.push('\n');
                }
                "left" => out.left.push(rest.to_string()),
                "exit" | "signal" => {
                    let n = rest
                        .trim()
                        .parse()
                        .map_err(|_| format!("bad line {line:?}"))?;
                    if word == "exit" {
                        out.code = Some(n);
                    } else {
                        out.signal = Some(n);
                    }
                    out.run_ms = started.map_or(0, |t| t.elapsed().as_millis() as u64);
                    return Ok(());
                }
                "error:" => return Err(rest.to_string()),
                _ => return Err(format!("unexpected line from the guest: {line:?}")),
            }
        }
        if let Some(st) = exited {
            return Err(format!("qemu exited ({st}) before the program ended"));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the program did not end within {} s of qemu's start",
                timeout.as_secs()
            ));
        }
    }
}

/// `true` for a one-shot boot (`/init __strata-vm-init run`).
pub fn is_run(args: &[OsString]) -> bool {
    args.get(2).is_some_and(|a| a == RUN_ARG)
}

/// The guest's init in a one-shot boot: the same set-up as a served boot
/// ([`guest::setup`]), the program instead of the server, then power-off.
pub fn run_in_guest() -> ! {
    match guest::setup() {
        Ok(g) => {
            if let Err(e) = run_program(&g.ctl) {
                guest::report_error(&g.ctl, &e);
            }
        }
        // setup() has told the host already when it could.
        Err(e) => guest::console(&e.to_string()),
    }
    guest::power_off()
}

fn fail(step: impl Into<String>, e: impl std::fmt::Display) -> GuestError {
    GuestError {
        step: step.into(),
        message: e.to_string(),
    }
}

/// One line to the host; the control channel is shared by the two
/// output streams and the status, so each line goes out whole.
fn send(ctl: &Mutex<File>, line: &str) {
    let mut f = ctl.lock().unwrap_or_else(|p| p.into_inner());
    let _ = writeln!(f, "{line}");
    let _ = f.flush();
}

fn run_program(ctl: &File) -> Result<(), GuestError> {
    let raw = fs::read(SPEC_FILE).map_err(|e| fail(format!("read {SPEC_FILE}"), e))?;
    let spec: GuestSpec =
        serde_json::from_slice(&raw).map_err(|e| fail(format!("parse {SPEC_FILE}"), e))?;
    let (prog, args) = spec
        .argv
        .split_first()
        .ok_or_else(|| fail(format!("read {SPEC_FILE}"), "an empty argv"))?;
    let mut child = Command::new(prog)
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", "/")
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("start {prog}"), e))?;
    let ctl = Arc::new(Mutex::new(
        ctl.try_clone()
            .map_err(|e| fail("clone the control channel", e))?,
    ));
    send(&ctl, "started");
    // The console too, so that a failure report's console tail says how
    // far the guest got.
    guest::console(&format!("one-shot: running {prog} as pid {}", child.id()));
    let (tx, rx) = std::sync::mpsc::channel();
    let streams: [(Option<Box<dyn Read + Send>>, &str); 2] = [
        (child.stdout.take().map(|p| Box::new(p) as _), "out"),
        (child.stderr.take().map(|p| Box::new(p) as _), "err"),
    ];
    for (pipe, tag) in streams {
        let (ctl, tx) = (ctl.clone(), tx.clone());
        std::thread::spawn(move || {
            if let Some(pipe) = pipe {
                let mut r = BufReader::new(pipe);
                let mut buf = Vec::new();
                while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                    let text = String::from_utf8_lossy(&buf);
                    send(&ctl, &format!("{tag} {}", text.trim_end_matches('\n')));
                    buf.clear();
                }
            }
            let _ = tx.send(());
        });
    }
    let status = reap_until(child.id())?;
    // The streams end when every process holding them has closed them;
    // one the program left behind might not, so the wait is bounded.
    let until = Instant::now() + Duration::from_secs(10);
    for _ in 0..2 {
        let _ = rx.recv_timeout(until.saturating_duration_since(Instant::now()));
    }
    for p in still_running(Duration::from_secs(2)) {
        send(&ctl, &format!("left {p}"));
    }
    let last = match (status.exit_status(), status.terminating_signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => format!("error: the program ended oddly ({status:?})"),
    };
    send(&ctl, &last);
    guest::console(&format!("one-shot: {prog} ended: {last}"));
    Ok(())
}

/// The guest's processes but init and kernel threads (whose cmdline is
/// empty) and zombies, as `PID CMDLINE`; looked at until none is left or
/// `within` has passed, reaping what ends meanwhile (orphans are init's).
fn still_running(within: Duration) -> Vec<String> {
    let until = Instant::now() + within;
    loop {
        while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
        let mut left = Vec::new();
        for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'));
            if pid != 1 && !cmdline.is_empty() && !zombie {
                let words: Vec<String> = cmdline
                    .split(|b| *b == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect();
                left.push(format!("{pid} {}", words.join(" ")));
            }
        }
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// As PID 1, reap every child (orphans of the program's descendants are
/// re-parented to init) until `pid`, the program, has ended; its status.
fn reap_until(pid: u32) -> Result<rustix::process::WaitStatus, GuestError> {
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some((p, st))) if p.as_raw_nonzero().get() as u32 == pid => return Ok(st),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(fail("wait for the program", e)),
        }
    }
}
