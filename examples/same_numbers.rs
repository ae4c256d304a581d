//! The same random numbers on every device: one seed, `rand` and `randn`
//! on each device that runs here, printed side by side, the raw words and
//! `rand` checked bit for bit against the CPU's.
//!
//! Run: `cargo run --example same_numbers`

use keel::generator::Generator;
use keel::random::{self, RandomOp};
use keel::{Buffer, Device, DeviceType};

const N: usize = 6;
const SEED: u64 = 42;

fn draw(d: Device, op: RandomOp) -> keel::Result<Vec<u32>> {
    let g = Generator::new(d)?;
    g.manual_seed(SEED);
    let s = keel::default_stream(d)?;
    let out = Buffer::new(d, 4 * N)?;
    random::launch_from(&g, &s, op, &out, N)?;
    out.read_as(&s)
}

fn main() -> keel::Result<()> {
    let devices: Vec<Device> = DeviceType::ALL
        .into_iter()
        .flat_map(keel::devices)
        .collect();
    let cpu = draw(Device::new(DeviceType::Cpu, 0)?, RandomOp::Rand)?;
    for d in devices {
        let name = keel::properties(d).map(|p| p.name).unwrap_or_default();
        let rand = draw(d, RandomOp::Rand)?;
        let randn = draw(d, RandomOp::Randn)?;
        let show = |v: &[u32]| {
            v.iter()
                .map(|&b| format!("{:+.6}", f32::from_bits(b)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!("{d} ({name})");
        println!("  rand  {}", show(&rand));
        println!("  randn {}", show(&randn));
        if rand != cpu {
            return Err(keel::Error::invalid(format!(
                "{d} gave different rand values than the CPU"
            )));
        }
    }
    println!("rand is bit-identical on every device");
    Ok(())
}
