use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr, or a hidden one (tests, `--quiet`, non-terminals).
pub fn progress_bar(total: u64, label: &str, visible: bool) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if !visible {
        bar.set_draw_target(ProgressDrawTarget::hidden());
        return bar;
    }
    let style =
        ProgressStyle::with_template("{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("valid template");
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    bar
}
