//! The window: eframe around [`App`], and `--screenshot` (render a few
//! frames, save a PNG through egui's screenshot request, quit).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::App;
use crate::cli::Options;

/// Why the window did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowError {
    /// No display to open a window on (the caller runs headless instead).
    NoDisplay(String),
    /// The window ran but its job failed (screenshot not written).
    Failed(String),
}

/// Whether a display server looks reachable (Linux: `DISPLAY` or
/// `WAYLAND_DISPLAY`; elsewhere always).
pub fn display_available() -> bool {
    if cfg!(target_os = "linux") {
        std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty())
            || std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty())
    } else {
        true
    }
}

/// Saves an egui screenshot as PNG.
pub fn save_png(image: &egui::ColorImage, path: &Path) -> Result<(), String> {
    let bytes: Vec<u8> = image.pixels.iter().flat_map(|c| c.to_array()).collect();
    let (w, h) = (image.size[0] as u32, image.size[1] as u32);
    image::save_buffer(path, &bytes, w, h, image::ExtendedColorType::Rgba8)
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

type Slot<T> = Arc<Mutex<Option<T>>>;

struct Shot {
    path: PathBuf,
    frames: u32,
    requested: bool,
    image: Slot<Arc<egui::ColorImage>>,
    result: Slot<Result<(), String>>,
}

struct WindowApp {
    app: App,
    shot: Option<Shot>,
}

impl eframe::App for WindowApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.ui(ui);
        let Some(shot) = &mut self.shot else {
            return;
        };
        let ctx = ui.ctx().clone();
        shot.frames += 1;
        ctx.request_repaint();
        let image = shot.image.lock().ok().and_then(|mut g| g.take());
        let finish = |r: Result<(), String>| {
            if let Ok(mut g) = shot.result.lock() {
                *g = Some(r);
            }
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
        };
        if let Some(image) = image {
            finish(save_png(&image, &shot.path));
        } else if shot.frames > 3000 {
            finish(Err("no screenshot arrived after 3000 frames".to_owned()));
        } else if shot.frames >= 8
            && !shot.requested
            && !self.app.is_running()
            && live_ready(&self.app)
        {
            shot.requested = true;
            let slot = shot.image.clone();
            let wake = ctx.clone();
            ctx.request_screenshot(move |img| {
                if let Ok(mut g) = slot.lock() {
                    *g = Some(img);
                }
                wake.request_repaint();
            });
        }
    }
}

/// Whether a live session (if any) has streamed for a couple of seconds
/// from every program: what a screenshot of it should show.
fn live_ready(app: &App) -> bool {
    app.live
        .as_ref()
        .is_none_or(|l| l.sources.iter().all(|s| s.chunks >= 20))
}

/// Opens the window and runs until it is closed (or, with
/// `--screenshot`, until the PNG is written).
pub fn run(options: &Options) -> Result<(), WindowError> {
    if !display_available() {
        return Err(WindowError::NoDisplay(
            "neither DISPLAY nor WAYLAND_DISPLAY is set".to_owned(),
        ));
    }
    let mut app = App::new(options);
    let mut shot = None;
    let result: Slot<Result<(), String>> = Arc::new(Mutex::new(None));
    if let Some(path) = &options.screenshot {
        if app.view.is_none() && options.connect.is_empty() {
            let device = app.sources.device.filter(|_| options.device.is_some());
            match crate::headless::record(&crate::headless::demo_jobs(device), false) {
                Ok(t) => app.set_trace(t, "built-in workloads"),
                Err(e) => app.error = Some(e),
            }
        }
        shot = Some(Shot {
            path: path.clone(),
            frames: 0,
            requested: false,
            image: Arc::new(Mutex::new(None)),
            result: result.clone(),
        });
    }
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("Keel profiler")
            .with_inner_size([1280.0, 800.0]),
        ..Default::default()
    };
    let screenshot = shot.is_some();
    // With nothing to open or connect to, a newcomer sees something at once:
    // the built-in workloads start on the selected (or every) device and the
    // timeline fills in as they finish.
    let autostart = options.open.is_empty()
        && options.diff.is_empty()
        && options.connect.is_empty()
        && !screenshot;
    let device = app.sources.device.filter(|_| options.device.is_some());
    eframe::run_native(
        "keel-profiler",
        native,
        Box::new(move |cc| {
            if autostart {
                app.tab = crate::Tab::Timeline;
                app.run_workloads(
                    crate::headless::demo_jobs(device),
                    Some(cc.egui_ctx.clone()),
                );
            }
            Ok(Box::new(WindowApp { app, shot }))
        }),
    )
    .map_err(|e| WindowError::NoDisplay(e.to_string()))?;
    if screenshot {
        let r = result.lock().ok().and_then(|mut g| g.take());
        match r {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(WindowError::Failed(e)),
            None => Err(WindowError::Failed(
                "the window closed before the screenshot was taken".to_owned(),
            )),
        }
    } else {
        Ok(())
    }
}
