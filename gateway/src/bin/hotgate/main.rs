//! `hotgate`: a thin command line over the gateway library.
//!
//! Today only `serve` exists, and it only opens the hot store (recovering every table)
//! and holds it until SIGINT or SIGTERM. Flight, HTTP, tokens and the embedded issuer
//! arrive with the data-plane issue.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: hotgate serve [--data-dir DIR]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut data_dir = PathBuf::from("./hotgate-data");
    match args.first().map(String::as_str) {
        Some("serve") => {}
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    let mut rest = args[1..].iter();
    while let Some(arg) = rest.next() {
        match (arg.as_str(), rest.next()) {
            ("--data-dir", Some(dir)) => data_dir = PathBuf::from(dir),
            _ => {
                eprintln!("hotgate: unexpected argument {arg:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hotgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(data_dir))
}

async fn serve(data_dir: PathBuf) -> ExitCode {
    let store = match hotgate_store::Store::open(&data_dir, hotgate_store::StoreOptions::default())
    {
        Ok(store) => store,
        Err(e) => {
            eprintln!(
                "hotgate: cannot open the store in {}: {e}",
                data_dir.display()
            );
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "hotgate: hot store open in {} with {} table(s); Flight and HTTP are not built yet. \
         Stop with Ctrl-C or SIGTERM.",
        data_dir.display(),
        store.tables().len()
    );
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hotgate: cannot listen for SIGTERM: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    store.close().await;
    eprintln!("hotgate: stopped cleanly");
    ExitCode::SUCCESS
}
