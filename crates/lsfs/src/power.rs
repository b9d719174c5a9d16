//! The machine's power source, read from sysfs for the cleaner's
//! `power = "auto"`: the engine reads no system state, the binary that
//! mounts it does.

use lsfs_core::gc::PowerSource;

/// Reads /sys/class/power_supply at every question: on battery when a
/// battery reports Discharging and no mains supply is online. A machine
/// without the directory (a VM, a container) counts as on AC.
pub struct SysfsPower;

impl PowerSource for SysfsPower {
    fn on_battery(&self) -> bool {
        let Ok(dir) = std::fs::read_dir("/sys/class/power_supply") else {
            return false;
        };
        let mut mains_online = false;
        let mut discharging = false;
        for e in dir.flatten() {
            let p = e.path();
            let kind = std::fs::read_to_string(p.join("type")).unwrap_or_default();
            match kind.trim() {
                "Mains" => {
                    mains_online |= std::fs::read_to_string(p.join("online"))
                        .unwrap_or_default()
                        .trim()
                        == "1"
                }
                "Battery" => {
                    discharging |= std::fs::read_to_string(p.join("status"))
                        .unwrap_or_default()
                        .trim()
                        == "Discharging"
                }
                _ => {}
            }
        }
        discharging && !mains_online
    }
}
