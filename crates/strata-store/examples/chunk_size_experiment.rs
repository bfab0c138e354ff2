//! EXPERIMENT, not the Store's code path: what larger chunks save.
//!
//! Format 3 cut every file into 4 KiB-average chunks (1 KiB min, 16 KiB
//! max); format 4 cuts files of 16 MiB or more into 64 KiB-average ones
//! (32 KiB min, 256 KiB max; `chunker.rs`, docs/design.md "Chunk sizes"),
//! and this program was the evidence for it. It repeats the CPU phases of
//! committing a fresh 32 MiB random file, one thread, with the small
//! parameters, with 16 / 64 / 256 KiB and with the 32 / 64 / 256 KiB the
//! Store took, and prints each phase's time (the fastest of several runs,
//! so the least disturbed by other load on the machine): FastCDC's cut
//! points; the BLAKE3 ids (`derive_key`, as `ObjectId::hash`); the
//! randomness test and the copy of `objects::prepare_with_id` (the same
//! four-table histogram over every byte, reimplemented here; the Store
//! samples it); inserting the chunks as rows of a table like `objects` in
//! one transaction (WAL, `synchronous = NORMAL`, the Store's page cache
//! size); the PASSIVE checkpoint after it.
//!
//! Run: `cargo run --release -p strata-store --example chunk_size_experiment
//! [-- DIR]` (DIR: where the scratch databases go, default /var/tmp, so
//! that ext4 is measured rather than a tmpfs).

mod common;
use common::random;

const SIZE: usize = 32 << 20;
const RUNS: usize = 7;

/// Wall time of `f` in ms. The program runs on one thread, so on an idle
/// core this is its CPU time; `main` reports the fastest of several runs,
/// the one least disturbed by other work on the machine. (The thread's
/// CPU clock in /proc/thread-self/schedstat advances in whole 4 ms ticks
/// here, too coarse for phases of 5-20 ms.)
fn cpu<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = std::time::Instant::now();
    let v = f();
    (v, t.elapsed().as_secs_f64() * 1e3)
}

/// The histogram pass of `objects::looks_random` (four tables, summed).
fn histogram(raw: &[u8]) -> [u32; 256] {
    let mut t = [[0u32; 256]; 4];
    let mut q = raw.chunks_exact(4);
    for c in &mut q {
        t[0][c[0] as usize] += 1;
        t[1][c[1] as usize] += 1;
        t[2][c[2] as usize] += 1;
        t[3][c[3] as usize] += 1;
    }
    for &b in q.remainder() {
        t[0][b as usize] += 1;
    }
    std::array::from_fn(|i| t[0][i] + t[1][i] + t[2][i] + t[3][i])
}

struct Phases {
    chunks: usize,
    cut: f64,
    hash: f64,
    prepare: f64,
    insert: f64,
    checkpoint: f64,
}

fn run(conn: &rusqlite::Connection, data: &[u8], (min, avg, max): (usize, usize, usize)) -> Phases {
    let (cuts, cut) = cpu(|| {
        fastcdc::v2020::FastCDC::new(data, min, avg, max)
            .map(|c| (c.offset, c.length))
            .collect::<Vec<_>>()
    });
    let (ids, hash) = cpu(|| {
        cuts.iter()
            .map(|&(o, l)| {
                let mut h = blake3::Hasher::new_derive_key("strata 2026-11 object chunk v1");
                h.update(&data[o..o + l]);
                *h.finalize().as_bytes()
            })
            .collect::<Vec<[u8; 32]>>()
    });
    let (rows, prepare) = cpu(|| {
        cuts.iter()
            .zip(&ids)
            .map(|(&(o, l), id)| {
                let raw = &data[o..o + l];
                std::hint::black_box(histogram(raw));
                (*id, raw.to_vec())
            })
            .collect::<Vec<_>>()
    });
    let mut rows = rows;
    rows.sort_unstable_by_key(|r| r.0);
    let ((), insert) = cpu(|| {
        let tx = conn.unchecked_transaction().expect("begin");
        {
            let mut st = tx
                .prepare(
                    "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data) \
                     VALUES (?1, 1, 0, ?2, NULL, 0, ?3)",
                )
                .expect("prepare");
            for (id, raw) in &rows {
                st.execute((&id[..], raw.len() as i64, raw))
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
    });
    let ((), checkpoint) = cpu(|| {
        let (log, done): (i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })
            .expect("checkpoint");
        assert_eq!(log, done, "the checkpoint copied the whole WAL");
        assert!(log > 0, "the insert went through the WAL");
    });
    Phases {
        chunks: cuts.len(),
        cut,
        hash,
        prepare,
        insert,
        checkpoint,
    }
}

fn fastest(v: Vec<f64>) -> f64 {
    v.into_iter().fold(f64::INFINITY, f64::min)
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or("/var/tmp".into()));
    println!("fresh 32 MiB random file, one thread, each phase's fastest of {RUNS} runs (ms)");
    println!("chunks (min/avg/max)  count  cut  hash  test+copy  insert  checkpoint  total");
    for params in [
        (1024, 4096, 16384),
        (16384, 65536, 262144),
        (32768, 65536, 262144),
    ] {
        // One database per parameter set, as a Store is: each run's WAL
        // starts over at the frames the last one wrote and checkpointed.
        let db = dir.join(format!("chunk-size-experiment-{}.db", params.1));
        // What an interrupted earlier run left.
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let conn = rusqlite::Connection::open(&db).expect("open the scratch database");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 0; \
             CREATE TABLE objects (rowid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, \
             kind INTEGER NOT NULL, enc INTEGER NOT NULL, raw_len INTEGER NOT NULL, base BLOB, \
             depth INTEGER NOT NULL, data BLOB NOT NULL);",
        )
        .expect("create the scratch table");
        // Run 0 warms the WAL up (its first frames are new to the file);
        // every run stores a file of its own (new rows).
        let all: Vec<Phases> = (0..=RUNS)
            .map(|r| run(&conn, &random(SIZE, 42 + r as u64), params))
            .skip(1)
            .collect();
        drop(conn);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let m = |f: fn(&Phases) -> f64| fastest(all.iter().map(f).collect());
        let (cut, hash, prep, ins, ck) = (
            m(|p| p.cut),
            m(|p| p.hash),
            m(|p| p.prepare),
            m(|p| p.insert),
            m(|p| p.checkpoint),
        );
        println!(
            "{:>5}/{:>5}/{:>6}  {:>5}  {cut:5.1}  {hash:5.1}  {prep:9.1}  {ins:6.1}  {ck:10.1}  {:5.1}",
            params.0 / 1024,
            params.1 / 1024,
            params.2 / 1024,
            all[0].chunks,
            cut + hash + prep + ins + ck
        );
    }
}
