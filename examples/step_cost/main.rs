//! The library's CPU work per step against the number of ranks and the batch size, in
//! one process playing rank 0 of P (no MPI; see `measure.rs`). Built with the library's `bench` feature, which
//! exposes the internals it measures.
//!
//!   cargo run --release --features bench --example step_cost > benches/scale/step_cost.csv
//!   cargo run --release --features bench --example step_cost -- 4096 256     # one point (P, B)
//!   cargo run --release --features bench --example step_cost -- replica 1000000000 4096 8 256   # N P G B
//!   cargo run --release --features bench --example step_cost -- node 2 256 256   # one node: P B sample bytes
//!
//! CSV on stdout (ranks, batch, sampler_us, plan_us, served_us, agreement_us, asked_of_me_us,
//! total_us, inversion_per_epoch_us, replan_all_us); a readable table on stderr.

mod measure;

use measure::{measure, one_node, replica_inversion};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("replica") {
        args.remove(0);
        return replica(&args);
    }
    if args.first().map(String::as_str) == Some("node") {
        args.remove(0);
        return node(&args);
    }
    let args: Vec<u64> = args.iter().map(|a| a.parse().expect("usage: step_cost [P B]")).collect();
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

/// The epoch's inversion of one owner with replica groups (N samples, P ranks, groups of
/// G, batch B): its own group's positions scanned (the loader) against every owned id
/// walked (the way before).
fn replica(args: &[String]) {
    let usage = "usage: step_cost replica N P G B";
    let v: Vec<u64> = args.iter().map(|a| a.parse().expect(usage)).collect();
    let [n, p, g, b] = v[..] else { panic!("{usage}") };
    eprintln!("inverting an owner of {} samples (N = {n}, P = {p}, groups of {g}, B = {b}) ...", n / g);
    let [group, every_id] = replica_inversion(n, p as usize, g as usize, b);
    println!("n,ranks,group,batch,group_scan_s,group_positions,every_id_walk_s,every_id_positions");
    println!("{n},{p},{g},{b},{:.4},{},{:.4},{}", group.0, group.1, every_id.0, every_id.1);
}

/// The sampler's part of a step on one node (every sample copied from shared memory):
/// drawing the batch and planning it, medians over 2000 steps.
fn node(args: &[String]) {
    let usage = "usage: step_cost node P B SAMPLE_BYTES";
    let v: Vec<u64> = args.iter().map(|a| a.parse().expect(usage)).collect();
    let [p, b, bytes] = v[..] else { panic!("{usage}") };
    let (sampler, plan) = one_node(p as usize, b, bytes, 2000);
    println!("ranks,batch,sample_bytes,sampler_us,plan_us");
    println!("{p},{b},{bytes},{sampler:.3},{plan:.3}");
}
