//! The devices panel: every device of every compiled backend, grouped by
//! backend, with properties and capability checks; unavailable backends
//! with the reason.

use egui::{Color32, RichText, Ui};

use crate::devices::{BackendInfo, capabilities, property_rows};

/// Shows `backends`.
pub fn show(ui: &mut Ui, backends: &[BackendInfo]) {
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            for b in backends {
                ui.heading(format!("{} ({} devices)", b.name, b.devices.len()));
                if let Some(reason) = &b.unavailable {
                    ui.colored_label(
                        Color32::from_rgb(230, 150, 60),
                        format!("{} unavailable: {reason}", b.name),
                    );
                }
                for (d, props) in &b.devices {
                    match props {
                        Ok(p) => {
                            egui::CollapsingHeader::new(
                                RichText::new(format!("{d}: {} ({})", p.name, p.kind)).strong(),
                            )
                            .id_salt(d.to_string())
                            .default_open(true)
                            .show(ui, |ui| {
                                ui.horizontal_wrapped(|ui| {
                                    for c in capabilities(p) {
                                        let ok = c.value.starts_with("yes");
                                        let color = if ok {
                                            Color32::from_rgb(90, 200, 90)
                                        } else {
                                            ui.visuals().weak_text_color()
                                        };
                                        ui.colored_label(color, format!("{}: {}", c.name, c.value));
                                        ui.separator();
                                    }
                                });
                                egui::CollapsingHeader::new("properties")
                                    .id_salt(format!("{d} properties"))
                                    .show(ui, |ui| {
                                        egui::Grid::new(format!("{d} grid"))
                                            .striped(true)
                                            .num_columns(2)
                                            .show(ui, |ui| {
                                                for (k, v) in property_rows(p) {
                                                    ui.label(k);
                                                    ui.add(egui::Label::new(v).wrap());
                                                    ui.end_row();
                                                }
                                            });
                                    });
                            });
                        }
                        Err(e) => {
                            ui.colored_label(Color32::RED, format!("{d}: properties failed: {e}"));
                        }
                    }
                }
                ui.separator();
            }
        });
}
