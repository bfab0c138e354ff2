//! Sandbox create-to-ready and exec latency through the SDK (docs/benchmarks.md's
//! benchmarks): `cargo run --release -p strata-sdk --example exec_bench [N]`
//! as root. Prints median and p99 of N (default 200) execs of `true`
//! (`.output()`: create + output stream + exit), and of 5 Sandbox creates.

use std::time::{Duration, Instant};

use strata_sdk::{Sandbox, SandboxSpec, Store};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

fn main() {
    strata_sdk::maybe_run_internal();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    let tmp = tempfile::tempdir().expect("tempdir");
    rt.block_on(async {
        let src = tmp.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("f"), b"x").unwrap();
        let store = Store::create(tmp.path().join("store")).await.unwrap();
        store.create_project_from("p", &src).await.unwrap();

        let mut creates = Vec::new();
        let mut closes = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let sb = Sandbox::create(SandboxSpec::new(store.dir()))
                .await
                .unwrap();
            creates.push(t.elapsed());
            let t = Instant::now();
            sb.close().await.unwrap();
            closes.push(t.elapsed());
        }
        let sb = Sandbox::create(SandboxSpec::new(store.dir()))
            .await
            .unwrap();
        let ws = sb.mount("p/main", None).await.unwrap();
        for _ in 0..10 {
            ws.exec(["true"]).output().await.unwrap();
        }
        let mut execs = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let o = ws.exec(["true"]).output().await.unwrap();
            execs.push(t.elapsed());
            assert!(o.status.success());
        }
        let mut spawns = Vec::with_capacity(n / 4);
        for _ in 0..n / 4 {
            let t = Instant::now();
            let mut h = ws.exec(["sleep", "1000"]).spawn().await.unwrap();
            h.cancel().await.unwrap();
            spawns.push(t.elapsed());
        }
        ws.unmount(true).await.unwrap();
        sb.close().await.unwrap();
        println!(
            "sandbox create-to-ready: median {:.2} ms, max {:.2} ms (5 runs)",
            pct(&mut creates, 0.5),
            pct(&mut creates, 1.0)
        );
        println!(
            "sandbox close:           median {:.2} ms, max {:.2} ms (5 runs)",
            pct(&mut closes, 0.5),
            pct(&mut closes, 1.0)
        );
        println!(
            "exec `true` (.output()): median {:.2} ms, p99 {:.2} ms ({n} runs)",
            pct(&mut execs, 0.5),
            pct(&mut execs, 0.99)
        );
        println!(
            "spawn `sleep 1000` + cancel: median {:.2} ms, p99 {:.2} ms ({} runs)",
            pct(&mut spawns, 0.5),
            pct(&mut spawns, 0.99),
            spawns.len()
        );
    });
}
