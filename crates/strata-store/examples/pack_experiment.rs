//! EXPERIMENT, not the Store's code path: what storing chunk bytes in an
//! append-only pack file, with only an index row per chunk in SQLite,
//! would cost against inserting the bytes into SQLite.
//!
//! For a fresh 32 MiB random file in the Store's chunk parameters (the cut
//! points and ids computed first, untimed), one thread, each phase's
//! fastest of several runs: (a) today's insert, every chunk's bytes as a
//! row of the `objects` table in one transaction, then the PASSIVE
//! checkpoint; (b) the bytes appended to a pack file in 2 MiB writes, the
//! index rows (the id and a 20-byte locator) in one transaction, and the
//! `fdatasync` of the pack that must precede that transaction's commit.
//! With `FADVISE=1` each 2 MiB write is followed by `fadvise(DONTNEED)` on
//! its range, which starts its writeback at once (what pack.rs does).
//!
//! Run: `[FADVISE=1] cargo run --release -p strata-store --example
//! pack_experiment [-- DIR]` (DIR on ext4, default /var/tmp).

mod common;
use common::random;

const SIZE: usize = 32 << 20;
const RUNS: usize = 7;

fn ms<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = std::time::Instant::now();
    let v = f();
    (v, t.elapsed().as_secs_f64() * 1e3)
}

fn table(conn: &rusqlite::Connection) {
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 0; \
         CREATE TABLE objects (rowid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, \
         kind INTEGER NOT NULL, enc INTEGER NOT NULL, raw_len INTEGER NOT NULL, base BLOB, \
         depth INTEGER NOT NULL, data BLOB NOT NULL);",
    )
    .expect("create the scratch table");
}

fn chunks(data: &[u8]) -> Vec<([u8; 32], usize, usize)> {
    let mut v: Vec<_> = fastcdc::v2020::FastCDC::new(data, 1024, 4096, 16384)
        .map(|c| {
            let mut h = blake3::Hasher::new_derive_key("strata 2026-11 object chunk v1");
            h.update(&data[c.offset..c.offset + c.length]);
            (*h.finalize().as_bytes(), c.offset, c.length)
        })
        .collect();
    v.sort_unstable_by_key(|c| c.0);
    v
}

fn sqlite_rows(conn: &rusqlite::Connection, data: &[u8], cs: &[([u8; 32], usize, usize)]) -> f64 {
    let ((), t) = ms(|| {
        let tx = conn.unchecked_transaction().expect("begin");
        {
            let mut st = tx
                .prepare(
                    "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data) \
                     VALUES (?1, 1, 0, ?2, NULL, 0, ?3)",
                )
                .expect("prepare");
            for (id, o, l) in cs {
                st.execute((&id[..], *l as i64, &data[*o..o + l]))
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
    });
    t
}

fn packed(
    conn: &rusqlite::Connection,
    pack: &std::fs::File,
    data: &[u8],
    cs: &[([u8; 32], usize, usize)],
) -> (f64, f64, f64) {
    use std::os::unix::fs::FileExt;
    let base = pack.metadata().expect("stat").len();
    // The pack gets the bytes in file order (as the pipeline produces
    // them), 2 MiB at a time.
    let ((), write) = ms(|| {
        let mut off = 0usize;
        while off < data.len() {
            let n = (2 << 20).min(data.len() - off);
            pack.write_all_at(&data[off..off + n], base + off as u64)
                .expect("write the pack");
            if std::env::var_os("FADVISE").is_some() {
                rustix::fs::fadvise(
                    pack,
                    base + off as u64,
                    std::num::NonZeroU64::new(n as u64),
                    rustix::fs::Advice::DontNeed,
                )
                .ok();
            }
            off += n;
        }
    });
    let ((), index) = ms(|| {
        let tx = conn.unchecked_transaction().expect("begin");
        {
            let mut st = tx
                .prepare(
                    "INSERT OR IGNORE INTO objects (id, kind, enc, raw_len, base, depth, data) \
                     VALUES (?1, 1, 3, ?2, NULL, 0, ?3)",
                )
                .expect("prepare");
            for (id, o, l) in cs {
                let mut loc = [0u8; 20];
                loc[..8].copy_from_slice(&7u64.to_le_bytes());
                loc[8..16].copy_from_slice(&(base + *o as u64).to_le_bytes());
                loc[16..].copy_from_slice(&(*l as u32).to_le_bytes());
                st.execute((&id[..], *l as i64, &loc[..])).expect("insert");
            }
        }
        tx.commit().expect("commit");
    });
    let ((), sync) = ms(|| rustix::fs::fdatasync(pack).expect("fdatasync"));
    (write, index, sync)
}

fn fastest(v: impl Iterator<Item = f64>) -> f64 {
    v.fold(f64::INFINITY, f64::min)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or("/var/tmp".into()));
    let files: Vec<Vec<u8>> = (0..=RUNS).map(|r| random(SIZE, 77 + r as u64)).collect();
    let cuts: Vec<_> = files.iter().map(|f| chunks(f)).collect();
    let clean = |p: &std::path::Path| {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
        }
    };
    let db_a = dir.join("pack-experiment-a.db");
    clean(&db_a);
    let a = rusqlite::Connection::open(&db_a).expect("open");
    table(&a);
    let mut ins = vec![];
    let mut ck = vec![];
    for (f, c) in files.iter().zip(&cuts) {
        ins.push(sqlite_rows(&a, f, c));
        let ((), t) = ms(|| {
            a.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .expect("checkpoint")
        });
        ck.push(t);
    }
    drop(a);
    clean(&db_a);
    let db_b = dir.join("pack-experiment-b.db");
    clean(&db_b);
    let pack_path = dir.join("pack-experiment.pack");
    let _ = std::fs::remove_file(&pack_path);
    let b = rusqlite::Connection::open(&db_b).expect("open");
    table(&b);
    let pack = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&pack_path)
        .expect("open the pack");
    let mut w = vec![];
    let mut ix = vec![];
    let mut sy = vec![];
    for (f, c) in files.iter().zip(&cuts) {
        let (x, y, z) = packed(&b, &pack, f, c);
        w.push(x);
        ix.push(y);
        sy.push(z);
        b.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .expect("checkpoint");
    }
    drop(b);
    clean(&db_b);
    let _ = std::fs::remove_file(&pack_path);
    let s = |v: &[f64]| (fastest(v[1..].iter().copied()), median(v[1..].to_vec()));
    println!("fresh 32 MiB random file, {} chunks; ms, fastest / median of {RUNS} runs (after one warm-up)", cuts[0].len());
    println!(
        "(a) rows with the bytes, one transaction: {:.1} / {:.1}; checkpoint {:.1} / {:.1}",
        s(&ins).0,
        s(&ins).1,
        s(&ck).0,
        s(&ck).1
    );
    println!(
        "(b) pack write {:.1} / {:.1}; index rows {:.1} / {:.1}; fdatasync {:.1} / {:.1}",
        s(&w).0,
        s(&w).1,
        s(&ix).0,
        s(&ix).1,
        s(&sy).0,
        s(&sy).1
    );
}
