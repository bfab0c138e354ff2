//! Files as the command's uid: create, list, read.

use std::io::{Read, Write};
use std::process::ExitCode;

use crate::Args;
/// Try to create a file; print "ok" or "errno=N".
pub(crate) fn try_create(a: &Args) -> ExitCode {
    match std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(a.arg(1))
    {
        Ok(_) => {
            let _ = std::fs::remove_file(a.arg(1));
            println!("ok");
        }
        Err(e) => println!("errno={}", e.raw_os_error().unwrap_or(-1)),
    }
    ExitCode::SUCCESS
}

pub(crate) fn ls(a: &Args) -> ExitCode {
    let mut names: Vec<String> = std::fs::read_dir(a.arg(1))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for n in names {
        println!("{n}");
    }
    ExitCode::SUCCESS
}

pub(crate) fn cat(a: &Args) -> ExitCode {
    let mut v = Vec::new();
    let _ = std::fs::File::open(a.arg(1)).and_then(|mut f| f.read_to_end(&mut v));
    let _ = std::io::stdout().write_all(&v);
    ExitCode::SUCCESS
}
