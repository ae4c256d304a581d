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
    /// Open a trace file.
    Open(PathBuf),
    /// Save the shown trace.
    Save(PathBuf),
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
    /// Trace file path.
    pub path: String,
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
    if let Some(status) = &state.live {
        ui.label(status);
        if ui.button("Disconnect").clicked() {
            commands.push(Command::Disconnect);
        }
    } else if ui.button("Connect").clicked() {
        commands.push(Command::Connect(state.address.trim().to_owned()));
    }

    ui.separator();
    ui.heading("File");
    let label = ui.label("trace file");
    ui.add(egui::TextEdit::singleline(&mut state.path).desired_width(f32::INFINITY))
        .labelled_by(label.id);
    ui.horizontal(|ui| {
        if ui.button("Open").clicked() {
            commands.push(Command::Open(PathBuf::from(state.path.trim())));
        }
        if ui
            .add_enabled(has_trace, egui::Button::new("Save"))
            .clicked()
        {
            commands.push(Command::Save(PathBuf::from(state.path.trim())));
        }
    });
    ui.small(".json: Chrome trace (Perfetto); .keeltrace: native. Or drop a file on the window.");

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
