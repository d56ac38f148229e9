//! Predicted winner map of the two engines at scale, from interconnect parameters.
//!
//!   cargo run --release --features bench --example scale_model -- [--latency-us 2] [--bandwidth-gbs 25]
//!       [--get-us 1] [--overhead-us 0.25] [--memcpy-gbs 10] [--plan-ns 140]
//!       [--asked-ns 15] [--jitter-us 2] [--sample-bytes B] > benches/scale/scale_model.csv
//!
//! Prints CSV (kind, ranks, batch, sample_bytes, onesided_s, collective_s, winner) on
//! stdout, for steps with a blocking agreement (`agreed`) and sampler steps agreed
//! ahead (`agreed_ahead`), and, on stderr, a map per kind and sample size: rows are
//! rank counts, columns batch sizes, 'C' where the collective engine is predicted
//! faster and '1' where one-sided is. `--sample-bytes` replaces the three sample sizes
//! (256 B, 2 KB, 16 KB) by one (benches/smpi sets the model beside its runs).

mod model;

use model::{Interconnect, StepKind, StepOverheads, predict};

fn main() {
    let mut net = Interconnect::slingshot();
    let mut costs = StepOverheads::measured_here();
    let mut samples = vec![256.0, 2048.0, 16384.0];
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value: f64 = pair.get(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!(
                "usage: scale_model [--latency-us X] [--bandwidth-gbs X] [--get-us X] [--overhead-us X] \
                 [--memcpy-gbs X] [--plan-ns X] [--asked-ns X] [--jitter-us X] [--sample-bytes X]"
            );
            std::process::exit(2)
        });
        match pair[0].as_str() {
            "--latency-us" => net.latency = value * 1e-6,
            "--bandwidth-gbs" => net.bandwidth = value * 1e9,
            "--get-us" => net.get_overhead = value * 1e-6,
            "--overhead-us" => net.injection_overhead = value * 1e-6,
            "--memcpy-gbs" => net.memcpy_bandwidth = value * 1e9,
            "--plan-ns" => costs.plan_per_sample = value * 1e-9,
            "--asked-ns" => costs.asked_per_sample = value * 1e-9,
            "--jitter-us" => costs.jitter = value * 1e-6,
            "--sample-bytes" => samples = vec![value],
            other => {
                eprintln!("unknown option {other}");
                std::process::exit(2)
            }
        }
    }
    let ranks: Vec<usize> = (1..=11).map(|k| 1usize << k).collect(); // 2 .. 2048
    let batches: Vec<u64> = (0..=10).map(|k| 1u64 << k).collect(); // 1 .. 1024
    println!("kind,ranks,batch,sample_bytes,onesided_s,collective_s,winner");
    for kind in [StepKind::Agreed, StepKind::AgreedAhead] {
        for &sample in &samples {
            eprintln!("\n{} steps, sample {sample} B: rows ranks, columns batch per rank {batches:?}", kind.name());
            for &p in &ranks {
                let mut row = String::new();
                for &b in &batches {
                    let point = predict(&net, &costs, kind, p, b, sample);
                    println!(
                        "{},{p},{b},{sample},{:e},{:e},{}",
                        kind.name(),
                        point.onesided,
                        point.collective,
                        point.winner()
                    );
                    row.push(if point.winner() == "collective" { 'C' } else { '1' });
                }
                eprintln!("{p:>5} {row}");
            }
        }
    }
}
