//! The sources panel: built-in workloads, a live connection, trace files.
//! It only edits its own fields and returns [`Command`]s; the app carries
//! them out.

use std::path::PathBuf;

use egui::{Color32, Ui};
use keel::Device;

use crate::workloads::Workload;

/// What the user asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run these workloads in one profiler session.
    Run(Vec<(Workload, Device)>),
    /// Connect to a live server.
    Connect(String),
    /// Drop the live connection.
    Disconnect,
    /// Open trace files (several: one trace, one group of lanes per file).
    Open(Vec<PathBuf>),
    /// Save the shown trace.
    Save(PathBuf),
    /// Compare the second file (the candidate) with the first (the
    /// baseline).
    Diff(PathBuf, PathBuf),
}

/// The panel's fields and what the app reports into it.
#[derive(Debug, Clone)]
pub struct SourcesState {
    /// Devices the workloads can run on.
    pub devices: Vec<Device>,
    /// The chosen device.
    pub device: Option<Device>,
    /// Live server address.
    pub address: String,
    /// Trace file paths, one per line (see [`paths`]).
    pub path: String,
    /// How several files' clocks are aligned when they open as one.
    pub align: keel_trace::Alignment,
    /// (done, total) of a running workload batch.
    pub progress: Option<(usize, usize)>,
    /// Whether a live connection is open, and its status line.
    pub live: Option<String>,
    /// Recent messages (workload results, errors).
    pub log: Vec<String>,
}

impl SourcesState {
    /// State with `devices` to choose from and `device` chosen.
    pub fn new(devices: Vec<Device>, device: Option<Device>) -> SourcesState {
        let device = device.or_else(|| devices.first().copied());
        SourcesState {
            devices,
            device,
            address: "127.0.0.1:7878".to_owned(),
            path: std::env::temp_dir()
                .join("keel-trace.json")
                .display()
                .to_string(),
            align: keel_trace::Alignment::Clock,
            progress: None,
            live: None,
            log: Vec::new(),
        }
    }

    /// Adds a line to the log (keeps the last 200).
    pub fn say(&mut self, line: impl Into<String>) {
        self.log.push(line.into());
        if self.log.len() > 200 {
            self.log.remove(0);
        }
    }
}

/// The paths listed in the file field: one per line, blank lines and
/// surrounding spaces ignored.
pub fn paths(text: &str) -> Vec<PathBuf> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// The file field's text for `paths`: one per line.
pub fn path_text(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Shows the panel; returns what to do.
pub fn show(ui: &mut Ui, state: &mut SourcesState, has_trace: bool) -> Vec<Command> {
    let mut commands = Vec::new();
    ui.heading("Workloads");
    let device_label = state
        .device
        .map_or_else(|| "no device".to_owned(), |d| d.to_string());
    egui::ComboBox::from_label("device")
        .selected_text(device_label)
        .show_ui(ui, |ui| {
            for &d in &state.devices {
                ui.selectable_value(&mut state.device, Some(d), d.to_string());
            }
        });
    let running = state.progress.is_some();
    ui.add_enabled_ui(!running && state.device.is_some(), |ui| {
        if let Some(d) = state.device {
            for w in Workload::ALL {
                if ui.button(format!("Run {}", w.name())).clicked() {
                    commands.push(Command::Run(vec![(w, d)]));
                }
            }
            if ui.button("Run all").clicked() {
                commands.push(Command::Run(
                    Workload::ALL.iter().map(|&w| (w, d)).collect(),
                ));
            }
        }
    });
    if let Some((done, total)) = state.progress {
        ui.add(
            egui::ProgressBar::new(done as f32 / total.max(1) as f32)
                .text(format!("{done}/{total} workloads"))
                .animate(true),
        );
    }

    ui.separator();
    ui.heading("Live");
    ui.horizontal(|ui| {
        let label = ui.label("address");
        ui.add(egui::TextEdit::singleline(&mut state.address).desired_width(140.0))
            .labelled_by(label.id);
    });
    ui.horizontal(|ui| {
        // While streaming, another address adds a program beside the
        // others, on one clock.
        let connect = if state.live.is_some() {
            "Add program"
        } else {
            "Connect"
        };
        if ui.button(connect).clicked() {
            commands.push(Command::Connect(state.address.trim().to_owned()));
        }
        if state.live.is_some() && ui.button("Disconnect").clicked() {
            commands.push(Command::Disconnect);
        }
    });
    if let Some(status) = &state.live {
        ui.label(status);
    }

    ui.separator();
    ui.heading("File");
    let label = ui.label("trace files (one per line)");
    ui.add(
        egui::TextEdit::multiline(&mut state.path)
            .desired_rows(2)
            .desired_width(f32::INFINITY),
    )
    .labelled_by(label.id);
    let listed = paths(&state.path);
    ui.horizontal(|ui| {
        if ui
            .add_enabled(!listed.is_empty(), egui::Button::new("Open"))
            .clicked()
        {
            commands.push(Command::Open(listed.clone()));
        }
        let save = ui
            .add_enabled(has_trace && listed.len() == 1, egui::Button::new("Save"))
            .on_disabled_hover_text("Save writes one file: list exactly one path");
        if save.clicked()
            && let Some(p) = listed.first()
        {
            commands.push(Command::Save(p.clone()));
        }
        let diff = ui
            .add_enabled(listed.len() == 2, egui::Button::new("Diff"))
            .on_hover_text("Compare two files: the first is the baseline, the second the candidate")
            .on_disabled_hover_text("Diff compares two files: list exactly two paths");
        if diff.clicked()
            && let [base, cand] = listed.as_slice()
        {
            commands.push(Command::Diff(base.clone(), cand.clone()));
        }
    });
    ui.horizontal(|ui| {
        egui::ComboBox::from_label("ranks on one")
            .selected_text(state.align.name())
            .show_ui(ui, |ui| {
                for a in keel_trace::Alignment::ALL {
                    ui.selectable_value(&mut state.align, a, a.name());
                }
            })
            .response
            .on_hover_text(
                "How several files' clocks are aligned: clock (their own, skew kept), \
                 collectives (the ends of their NCCL kernels), start (each on its first event)",
            );
    });
    ui.small(
        ".json (.gz, .zst): Chrome or PyTorch trace; .keeltrace: native. Several files \
         (one per rank) open as one trace. Or drop files on the window.",
    );

    ui.separator();
    ui.heading("Log");
    egui::ScrollArea::vertical()
        .max_height(220.0)
        .stick_to_bottom(true)
        .show(ui, |ui| {
            for line in &state.log {
                let color = if line.contains("failed") || line.contains("error") {
                    Color32::from_rgb(240, 120, 100)
                } else {
                    ui.visuals().text_color()
                };
                ui.colored_label(color, line);
            }
        });
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_path_per_line() {
        assert_eq!(
            paths("  /t/rank0.json \n\n/t/rank 1.json.gz\r\n  "),
            [
                PathBuf::from("/t/rank0.json"),
                PathBuf::from("/t/rank 1.json.gz")
            ]
        );
        assert!(paths(" \n ").is_empty());
        let listed = [PathBuf::from("/a.json"), PathBuf::from("/b.json")];
        assert_eq!(paths(&path_text(&listed)), listed);
    }
}
