//! `hotgate`: a thin command line over the gateway library.

mod audit;
mod serve;
mod token;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// mimalloc: requests make many small allocations (JSON, Arrow arrays, gRPC frames), which
// it serves faster than glibc's allocator, notably across threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "hotgate",
    version,
    about = "A governance-aware hot tier for an Iceberg lakehouse"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every command shares: where the configuration comes from.
#[derive(Debug, clap::Args)]
struct ConfigArgs {
    /// A TOML configuration file; without one, the embedded all-local default.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Overrides `data_dir`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway (Flight and HTTP) until SIGINT or SIGTERM.
    Serve {
        #[command(flatten)]
        config: ConfigArgs,
        /// Overrides `flight_addr` (HOST:PORT).
        #[arg(long)]
        flight_addr: Option<std::net::SocketAddr>,
        /// Overrides `http_addr` (HOST:PORT).
        #[arg(long)]
        http_addr: Option<std::net::SocketAddr>,
    },
    /// Print a token from the embedded issuer.
    Token {
        #[command(flatten)]
        config: ConfigArgs,
        /// The principal name (`sub`).
        #[arg(long)]
        sub: String,
        /// A principal role to activate; repeat for several, `ALL` for every one.
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
        /// How long the token is valid, e.g. 15m, 1h.
        #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
        ttl: std::time::Duration,
    },
    /// Audit trail tools.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Print the public key (hex) that verifies audit checkpoints, creating the key pair
    /// in the data dir on first use.
    Pubkey {
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Re-check the audit chain and every checkpoint signature in a data dir, changing
    /// nothing (meant for a stopped server). Exits 1 and names the first bad seq and
    /// the kind of damage when the chain is broken.
    Verify {
        #[command(flatten)]
        config: ConfigArgs,
        /// Check checkpoints against this public key (hex) instead of the data dir's.
        #[arg(long)]
        public_key: Option<String>,
    },
    /// Print audit records from a running server, newest first, one JSON per line.
    Query {
        #[command(flatten)]
        read: AuditReadArgs,
        /// At most this many records.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Print the latest audit records oldest first, then follow new ones.
    Tail {
        #[command(flatten)]
        read: AuditReadArgs,
        /// How many records to print first.
        #[arg(long, short = 'n', default_value_t = 20)]
        last: usize,
        /// Print the latest records and stop instead of following.
        #[arg(long)]
        no_follow: bool,
        /// How often to ask for new records while following.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        every: std::time::Duration,
    },
}

/// Where `audit query` and `audit tail` read from, and which records.
#[derive(Debug, clap::Args)]
struct AuditReadArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    server: audit::ServerArgs,
    #[command(flatten)]
    filters: audit::Filters,
}

impl ConfigArgs {
    fn load(&self) -> Result<hotgate_gateway::Config, String> {
        let mut config =
            hotgate_gateway::Config::load(self.config.as_deref()).map_err(|e| e.to_string())?;
        if let Some(dir) = &self.data_dir {
            config.data_dir = dir.clone();
        }
        Ok(config)
    }
}

fn main() -> ExitCode {
    // Fail points exist only in test builds (the `failpoints` feature); FAILPOINTS
    // configures them, e.g. `FAILPOINTS=audit-append=return`.
    let _failpoints = fail::FailScenario::setup();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            flight_addr,
            http_addr,
        } => config.load().and_then(|mut c| {
            if let Some(a) = flight_addr {
                c.flight_addr = a;
            }
            if let Some(a) = http_addr {
                c.http_addr = a;
            }
            serve::serve(c)
        }),
        Command::Token {
            config,
            sub,
            roles,
            ttl,
        } => config
            .load()
            .and_then(|c| token::token(&c, &sub, &roles, ttl)),
        Command::Audit { command } => match command {
            AuditCommand::Pubkey { config } => config.load().and_then(|c| audit::pubkey(&c)),
            AuditCommand::Verify { config, public_key } => {
                match config
                    .load()
                    .and_then(|c| audit::verify(&c, public_key.as_deref()))
                {
                    Ok(true) => Ok(()),
                    Ok(false) => return ExitCode::FAILURE,
                    Err(e) => Err(e),
                }
            }
            AuditCommand::Query { read, limit } => read
                .config
                .load()
                .and_then(|c| audit::query(&c, &read.server, &read.filters, limit)),
            AuditCommand::Tail {
                read,
                last,
                no_follow,
                every,
            } => read.config.load().and_then(|c| {
                audit::tail(&c, &read.server, &read.filters, last, !no_follow, every)
            }),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hotgate: {e}");
            ExitCode::FAILURE
        }
    }
}
