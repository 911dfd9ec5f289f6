//! `unimem config show|check`.

use std::path::PathBuf;

use unimem_core::Result;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the effective configuration, each value with where it came from.
    Show,
    /// Validate a configuration file (and the UNIMEM_* environment).
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

pub fn run(cmd: &Command, config_file: Option<&std::path::Path>) -> Result<()> {
    match cmd {
        Command::Show => {
            let loaded = crate::load_config(config_file)?;
            if let Some(f) = &loaded.file {
                println!("# file: {}", f.display());
            }
            println!("{}", loaded.show());
        }
        Command::Check { file } => {
            let loaded = crate::load_config(Some(file))?;
            // The profile a file names must load too, or the first replay would fail on it.
            unimem_core::backends::cost_model(&loaded.config)?;
            println!("{}: ok", file.display());
        }
    }
    Ok(())
}
