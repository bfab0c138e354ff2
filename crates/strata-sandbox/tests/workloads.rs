//! Real programs under the seccomp allow list: a configure + make + cc
//! build, python3 with threads, subprocess and loopback sockets, git and
//! tar with gzip, each run as a command in a fresh Sandbox (uid 1500, no
//! capabilities, the filter installed) and each asserting what the
//! program produced, not only its exit status.
//!
//! They use only the host's /usr, /bin, /lib* and /etc (read-only) and the
//! Sandbox's private /tmp. Every program they need must be installed
//! (CI's Debian has gcc, make, python3, git, tar, gzip): a missing one
//! fails with its name.

mod common;

use common::{run, spec};
use strata_sandbox::{ExecSpec, Outcome};

fn sh(script: &str) -> ExecSpec {
    let mut s = spec(&["/bin/sh", "-eu", "-c", script]);
    s.env.push(("HOME".into(), "/tmp".into()));
    s.env.push(("LC_ALL".into(), "C".into()));
    s
}

/// Run `script` and return stdout; any failure shows both streams.
fn ok(script: &str) -> String {
    let (outcome, out, err) = run(sh(script));
    assert_eq!(
        outcome,
        Outcome::Exited(0),
        "script failed\nstdout:\n{out}\nstderr:\n{err}"
    );
    out
}

fn require(programs: &[&str]) {
    for p in programs {
        let found = ["/usr/bin", "/bin", "/usr/local/bin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(p).exists());
        assert!(
            found,
            "{p} is not installed on this host; the workload tests need it (apt-get install it)"
        );
    }
}

#[test]
fn configure_make_and_cc_build_a_program_that_runs() {
    require(&["cc", "make"]);
    let out = ok(r#"
mkdir /tmp/proj && cd /tmp/proj
cat > hello.c <<'EOF'
#include <stdio.h>
#include "config.h"
int main(void) { printf("hello from %s %d\n", GREETING, ANSWER); return 0; }
EOF
cat > configure <<'EOF'
#!/bin/sh
# A configure in the autotools manner: probe the compiler, write config.h
# and the Makefile.
set -e
CC=${CC:-cc}
printf 'checking whether %s works... ' "$CC"
echo 'int main(void){return 0;}' > conftest.c
$CC -o conftest conftest.c && ./conftest && echo yes
rm -f conftest conftest.c
printf 'checking for sizeof(long)... '
printf '#include <stdio.h>\nint main(void){printf("%%d\\n",(int)sizeof(long));return 0;}\n' > conftest.c
$CC -o conftest conftest.c
SIZEOF_LONG=$(./conftest); echo "$SIZEOF_LONG"
rm -f conftest conftest.c
cat > config.h <<EOH
#define GREETING "strata"
#define ANSWER 42
#define SIZEOF_LONG $SIZEOF_LONG
EOH
printf 'CC=%s\nhello: hello.o\n\t$(CC) -o $@ hello.o\nhello.o: hello.c config.h\n\t$(CC) -O2 -Wall -c hello.c\n' "$CC" > Makefile
echo 'config.status: creating Makefile'
EOF
chmod +x configure
./configure
make -j2
./hello
"#);
    assert!(out.contains("checking whether cc works... yes"), "{out}");
    assert!(out.contains("checking for sizeof(long)... 8"), "{out}");
    assert!(
        out.lines().last() == Some("hello from strata 42"),
        "the built binary did not print its greeting: {out}"
    );
}

#[test]
fn python3_threads_subprocess_and_loopback_sockets() {
    require(&["python3"]);
    let out = ok(r#"
cat > /tmp/t.py <<'EOF'
import socket, subprocess, threading, sys

# A loopback echo server on a thread, one client.
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
def serve():
    conn, _ = srv.accept()
    data = conn.recv(100)
    conn.sendall(data.upper())
    conn.close()
t = threading.Thread(target=serve)
t.start()
c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"ping over loopback")
print("echo:", c.recv(100).decode())
c.close()
t.join()

# A pool of threads adding up.
total = []
lock = threading.Lock()
def work(n):
    with lock:
        total.append(n * n)
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for th in threads: th.start()
for th in threads: th.join()
print("threads:", sum(total))

# A child process with a pipe.
r = subprocess.run([sys.executable, "-c", "import os; print('child', os.getuid())"],
                   capture_output=True, text=True, check=True)
print("subprocess:", r.stdout.strip())
EOF
python3 /tmp/t.py
"#);
    assert!(out.contains("echo: PING OVER LOOPBACK"), "{out}");
    assert!(out.contains("threads: 140"), "{out}");
    assert!(out.contains("subprocess: child 1500"), "{out}");
}

#[test]
fn git_init_add_commit_log() {
    require(&["git"]);
    let out = ok(r#"
mkdir /tmp/repo && cd /tmp/repo
git init -q -b main .
git config user.name 'Sandbox Agent'
git config user.email 'agent@example.invalid'
echo 'first line' > notes.txt
git add notes.txt
git commit -q -m 'first commit from a Sandbox'
echo 'second line' >> notes.txt
git commit -q -am 'second commit'
git log --format='%an|%s'
git show HEAD:notes.txt
git fsck --no-progress 2>&1 && echo fsck-ok
"#);
    assert!(
        out.starts_with("Sandbox Agent|second commit\nSandbox Agent|first commit from a Sandbox\n"),
        "{out}"
    );
    assert!(out.contains("first line\nsecond line\n"), "{out}");
    assert!(out.contains("fsck-ok"), "{out}");
}

#[test]
fn tar_gzip_round_trip_preserves_bytes() {
    require(&["tar", "gzip", "cmp"]);
    let out = ok(r#"
mkdir -p /tmp/src/sub && cd /tmp/src
head -c 300000 /dev/urandom > sub/random.bin
printf 'text\n' > a.txt
ln -s sub/random.bin link
chmod 0750 sub
cd /tmp
tar czf /tmp/archive.tar.gz src
mkdir /tmp/out && tar xzf /tmp/archive.tar.gz -C /tmp/out
cmp src/sub/random.bin out/src/sub/random.bin && echo random-same
cmp src/a.txt out/src/a.txt && echo text-same
echo "link=$(readlink out/src/link)"
echo "mode=$(stat -c %a out/src/sub)"
gzip -t /tmp/archive.tar.gz && echo gzip-ok
"#);
    for want in [
        "random-same",
        "text-same",
        "link=sub/random.bin",
        "mode=750",
        "gzip-ok",
    ] {
        assert!(out.contains(want), "{want} missing: {out}");
    }
}
