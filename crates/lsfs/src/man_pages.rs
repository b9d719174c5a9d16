//! `lsfs man`: the man pages, made from the command-line definition itself
//! (clap_mangen), so they cannot drift from `--help`.

use std::path::Path;

/// Print lsfs(1) to stdout, or with `out` write lsfs.1 and one page per
/// subcommand (lsfs-mount.1, lsfs-gc-run.1, …) there.
pub fn write(cmd: clap::Command, out: Option<&Path>) -> Result<(), String> {
    let Some(dir) = out else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .map_err(|e| e.to_string())?;
        return std::io::Write::write_all(&mut std::io::stdout(), &page).map_err(|e| e.to_string());
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    println!(
        "wrote lsfs.1 and a page per subcommand (lsfs-mount.1, …) to {}",
        dir.display()
    );
    Ok(())
}
