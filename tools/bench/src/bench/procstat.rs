//! Resident memory and CPU time of a process, and the machine's load, from `/proc`.

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`; 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// A process's resident set size in bytes, if it can be read.
pub(super) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    kib_field(&status, "VmRSS:")
}

/// A process's peak resident set size in bytes (`VmHWM`), if it can be read.
pub(super) fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    kib_field(&status, "VmHWM:")
}

/// How much of a process's resident memory is anonymous transparent huge pages, in bytes, if it
/// can be read (`AnonHugePages` of `/proc/<pid>/smaps_rollup`).
pub(super) fn huge_page_bytes(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    kib_field(&rollup, "AnonHugePages:")
}

/// A `Name:   123 kB` line's value in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// A process's user + system CPU time in seconds, if it can be read.
pub(super) fn cpu_seconds(pid: u32) -> Option<f64> {
    stat_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// User + system CPU seconds from a process's or a thread's `stat`.
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SEC)
}

/// CPU seconds (user + system) of the threads of `pid` whose name starts with `name` (names are
/// cut to 15 bytes by the kernel), summed; `None` when there is none.
pub(super) fn thread_cpu_seconds(pid: u32, name: &str) -> Option<f64> {
    let name = name.get(..15).unwrap_or(name);
    let mut total = None;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(name) {
            continue;
        }
        let Some(cpu) = std::fs::read_to_string(path.join("stat"))
            .ok()
            .and_then(|stat| stat_cpu_seconds(&stat))
        else {
            continue;
        };
        *total.get_or_insert(0.0) += cpu;
    }
    total
}

/// The machine's 1-minute load average, if it can be read.
pub(super) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_named_thread_of_this_process() {
        let t = std::thread::Builder::new()
            .name("procstat-spin-test".into())
            .spawn(|| {
                let began = std::time::Instant::now();
                let mut x = 0u64;
                while began.elapsed() < std::time::Duration::from_millis(100) {
                    x = x.wrapping_add(std::hint::black_box(1));
                }
                x
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let pid = std::process::id();
        let cpu = super::thread_cpu_seconds(pid, "procstat-spin-test");
        t.join().unwrap();
        assert!(cpu.is_some(), "the spinning thread is found while it runs");
        assert_eq!(super::thread_cpu_seconds(pid, "no-such-thread"), None);
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(super::rss_bytes(pid).unwrap() > 1024 * 1024);
        assert!(super::cpu_seconds(pid).unwrap() >= 0.0);
        assert!(super::rss_bytes(u32::MAX).is_none());
    }
}
