import Foundation

/// What the benchmark reads of processes and of the machine from /proc: peak memory, and CPU time, so that a run says
/// where its CPU went per purchase (a figure steadier than a rate on a shared machine).
enum ProcessAccounting {
    /// Clock ticks per second of /proc's CPU times (`USER_HZ`).
    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// Peak resident memory (VmHWM) of `pid` in MiB; nil when it is gone.
    static func peakRSSMiB(_ pid: Int32) -> Double? { statusMiB(pid, "VmHWM:") }

    /// Resident memory now (VmRSS) of `pid` in MiB; nil when it is gone.
    static func residentMiB(_ pid: Int32) -> Double? { statusMiB(pid, "VmRSS:") }

    /// A field of /proc/PID/status given in kB, in MiB.
    private static func statusMiB(_ pid: Int32, _ field: String) -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
              let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "") else { return nil }
        return kilobytes / 1024
    }

    /// CPU seconds `pid` has used (user and system, all its threads); nil when it is gone.
    static func cpuSeconds(_ pid: Int32) -> Double? {
        // The fields after the command name, which is in parentheses and may hold spaces: utime and stime are the 12th and 13th.
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let end = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / ticksPerSecond
    }

    /// CPU seconds used by every running process whose command name (`/proc/PID/comm`) is `name`, summed (PostgreSQL's
    /// backends, the broker). A process that ended since an earlier reading takes its seconds with it.
    static func cpuSeconds(ofProcessesNamed name: String) -> Double {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return 0 }
        var total = 0.0
        for entry in entries {
            guard let pid = Int32(entry),
                  let comm = try? String(contentsOfFile: "/proc/\(entry)/comm", encoding: .utf8),
                  comm.dropLast() == name[...] else { continue } // comm ends in a newline
            total += cpuSeconds(pid) ?? 0
        }
        return total
    }

    /// The whole machine's CPU time since boot, in seconds summed over its cores.
    struct MachineTime {
        /// Running anything (user to softirq; guest time is counted in user already).
        var busy: Double
        /// Idle, or idle waiting for I/O.
        var idle: Double
        /// Taken by the hypervisor for another guest while this one had work (steal).
        var stolen: Double

        static func - (end: MachineTime, start: MachineTime) -> MachineTime {
            MachineTime(busy: end.busy - start.busy, idle: end.idle - start.idle, stolen: end.stolen - start.stolen)
        }
    }

    /// From the first line of /proc/stat: user nice system idle iowait irq softirq steal …, in clock ticks.
    static func machineTime() -> MachineTime? {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return nil }
        let ticks = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard ticks.count >= 8 else { return nil }
        return MachineTime(busy: (ticks.prefix(7).reduce(0, +) - ticks[3] - ticks[4]) / ticksPerSecond,
                           idle: (ticks[3] + ticks[4]) / ticksPerSecond, stolen: ticks[7] / ticksPerSecond)
    }
}
