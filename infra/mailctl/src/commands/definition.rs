//! `campaign check`: a definition's folder read and checked; its problems one line each.

use anyhow::Result;
use std::path::Path;

/// Exit status of a definition with problems (1 is a command that failed to run).
pub const PROBLEMS: u8 = 2;

pub fn check(dir: &Path) -> Result<()> {
    let checked =
        mailctl::definition::read_dir(dir).and_then(|files| mailctl::definition::check(&files));
    match checked {
        Ok(summary) => {
            println!("{summary}");
            Ok(())
        }
        Err(problems) => {
            for problem in &problems {
                eprintln!("{problem}");
            }
            Err(crate::Exit {
                code: PROBLEMS,
                message: format!(
                    "{}: {} problem{}",
                    dir.display(),
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" }
                ),
            }
            .into())
        }
    }
}
