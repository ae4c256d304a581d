//! The same random numbers on every device: one seed, `rand` and `randn`
//! on each device that runs here, printed side by side and checked bit
//! for bit against the CPU's, with whether the device promises the
//! kernels' strict floating point (`Kernel::strict_float`; where it does
//! not, `randn`'s bits rest on the kernel's own fences).
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
    let cpu = Device::new(DeviceType::Cpu, 0)?;
    let (cpu_rand, cpu_randn) = (draw(cpu, RandomOp::Rand)?, draw(cpu, RandomOp::Randn)?);
    for d in devices {
        let (name, strict) = keel::properties(d)
            .map(|p| (p.name, p.strict_float))
            .unwrap_or_default();
        let rand = draw(d, RandomOp::Rand)?;
        let randn = draw(d, RandomOp::Randn)?;
        let show = |v: &[u32]| {
            v.iter()
                .map(|&b| format!("{:+.6}", f32::from_bits(b)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let promise = if strict {
            "strict floating point"
        } else {
            "strict floating point not promised"
        };
        println!("{d} ({name}; {promise})");
        println!("  rand  {}", show(&rand));
        println!("  randn {}", show(&randn));
        for (what, got, want) in [("rand", &rand, &cpu_rand), ("randn", &randn, &cpu_randn)] {
            if got != want {
                return Err(keel::Error::invalid(format!(
                    "{d} gave different {what} values than the CPU"
                )));
            }
        }
    }
    println!("rand and randn are bit-identical on every device");
    Ok(())
}
