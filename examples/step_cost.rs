//! The library's CPU work per step against the number of ranks and the batch size, in
//! one process playing rank 0 of P (no MPI; see `mdloader::step_cost`).
//!
//!   cargo run --release --example step_cost > benches/scale/step_cost.csv
//!   cargo run --release --example step_cost -- 4096 256     # one point (P, B)
//!
//! CSV on stdout (ranks, batch, sampler_us, plan_us, served_us, agreement_us, asked_of_me_us,
//! total_us, inversion_per_epoch_us, replan_all_us); a readable table on stderr.

use mdloader::step_cost::measure;

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("usage: step_cost [P B]")).collect();
    let (ranks, batches) = match args[..] {
        [p, b] => (vec![p as usize], vec![b]),
        _ => (vec![2usize, 8, 32, 128, 512, 2048, 4096, 16384], vec![1u64, 16, 256, 1024]),
    };
    println!("ranks,batch,sampler_us,plan_us,served_us,agreement_us,asked_of_me_us,total_us,inversion_per_epoch_us,replan_all_us");
    eprintln!(
        "{:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12}",
        "P", "B", "sampler", "plan", "served", "agree", "asked", "total", "invert/ep", "replan(old)"
    );
    for &p in &ranks {
        for &b in &batches {
            // Medians over up to 32 steps; fewer where the index would take gigabytes.
            let steps = if p as u64 * b > 1 << 22 { 4 } else { 32 };
            let c = measure(p, 0, b, steps * b, steps);
            println!(
                "{p},{b},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}",
                c.sampler, c.plan, c.served, c.agreement, c.asked_of_me, c.total(), c.inversion_per_epoch, c.replan_all
            );
            eprintln!(
                "{p:>6} {b:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>12.1} {:>12.1}",
                c.sampler, c.plan, c.served, c.agreement, c.asked_of_me, c.total(), c.inversion_per_epoch, c.replan_all
            );
        }
    }
}
