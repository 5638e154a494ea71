//! The command lines of the benchmark programs: `--help` prints the
//! program's options (with their defaults) on stdout and exits 0; a bad
//! argument prints one clear line and the usage on stderr and exits 2,
//! never a backtrace.

/// Parses the program's arguments with `parse`, which sees everything
/// but `--help`/`-h`. `help` is the full text, whose first line is the
/// usage.
pub fn parse<T>(
    program: &str,
    help: &str,
    parse: impl FnOnce(Vec<String>) -> anyhow::Result<T>,
) -> T {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        let _ = super::procs::print(help.trim_end());
        std::process::exit(0);
    }
    match parse(args) {
        Ok(parsed) => parsed,
        Err(e) => {
            let usage = help.lines().next().unwrap_or_default();
            eprintln!("{program}: {e:#}\n{usage}\n(--help lists the options)");
            std::process::exit(2);
        }
    }
}
