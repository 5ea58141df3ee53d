//! The process-wide pool ([`PermitPool::global`]): configured from the environment on first
//! use, or inside a permit inherited from a parent process.

use std::sync::OnceLock;

use super::inherited::Inherited;
use super::pool::PermitPool;
use crate::config::{Config, INHERITED_VAR};
use crate::host::{HostError, HostSlots, InheritError};

/// The process-wide pool ([`PermitPool::global`]).
static GLOBAL: OnceLock<PermitPool> = OnceLock::new();

impl PermitPool {
    /// The process-wide pool, configured from the environment ([`Config::global`]) on first
    /// use. If its slot directory is unusable, every acquisition fails with that error.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// // What `gpu_test_permit::acquire()` takes from: configured by the environment, host-wide.
    /// let pool = PermitPool::global();
    /// let permit = pool.acquire();
    /// assert!(permit.units() >= 1);
    /// ```
    #[inline]
    pub fn global() -> &'static PermitPool {
        // Inline: once set up, one load and a branch on every `gpu_test_permit::acquire()`.
        match GLOBAL.get() {
            Some(pool) => pool,
            None => PermitPool::global_first(),
        }
    }

    /// Sets up [`global`](Self::global) on first use. Out of line: it runs once.
    #[cold]
    #[inline(never)]
    fn global_first() -> &'static PermitPool {
        GLOBAL.get_or_init(|| {
            let cfg = Config::global();
            if let Some(inherited) = &cfg.inherited {
                let ignored = |why: &str| {
                    crate::notice::line(&format!(
                        "ignoring the permit inherited through {INHERITED_VAR}: it {why}; this \
                         process takes permits from the host slots as usual"
                    ))
                };
                match inherited {
                    Err(why) => ignored(why),
                    Ok(permit) => match crate::host::adopt_inherited(permit) {
                        Ok(files) => {
                            return PermitPool::inside(Inherited::new(permit.clone(), files), cfg);
                        }
                        Err(InheritError::Leftover(why)) => ignored(&why),
                        Err(InheritError::Unusable(why)) => {
                            let error = HostError::Inherited(format!(
                                "the permit inherited through {INHERITED_VAR} {why}"
                            ));
                            return PermitPool::builder()
                                .timeout(cfg.timeout)
                                .in_process_only()
                                .finish(None, Some(error), None);
                        }
                    },
                }
            }
            let gpus = match cfg.gpus {
                Some(g) => g.get(),
                None => detected_gpus(),
            };
            let mut b = PermitPool::builder()
                .concurrency(cfg.concurrency.get())
                .gpus(gpus)
                .timeout(cfg.timeout);
            b.slot_dir = Some(cfg.slot_dir.clone());
            b.trace = cfg.trace.clone();
            b.hold_timeout = cfg.hold_timeout;
            b.memory_budget = cfg.gpu_memory;
            b.probe_budget = true;
            b.auto = cfg.auto_concurrency;
            b.weights = cfg.weights;
            b.groups = cfg.gpu_groups.clone().unwrap_or_default();
            b.placement = cfg.placement;
            b.live_memory = cfg.live_memory;
            b.backfill = cfg.backfill;
            b.gpu_ids = cfg.gpu_list.clone();
            match b.clone().build() {
                Ok(pool) => pool,
                Err(e) => b.in_process_only().finish(None, Some(e), None),
            }
        })
    }

    /// The global pool of a process started inside a parent's permit: its host slots are
    /// those every process inside the permit shares ([`crate::host::share_dir`]), as many as
    /// the parent holds. Not traced: the parent's own span covers its command.
    fn inside(inherited: Inherited, cfg: &Config) -> PermitPool {
        let layout = crate::host::share_layout(&inherited.permit);
        let dir = crate::host::share_dir(&inherited.permit);
        let mut b = PermitPool::builder()
            .concurrency(layout.per_gpu)
            .gpus(layout.gpus)
            .in_process_only()
            .timeout(cfg.timeout);
        b.hold_timeout = cfg.hold_timeout;
        b.memory_budget = cfg.gpu_memory;
        b.probe_budget = true;
        b.placement = cfg.placement;
        let host = match HostSlots::open(&dir, layout, cfg.timeout) {
            Err(e) => Err(e),
            Ok(host) => {
                crate::host::let_other_users_probe(&dir);
                if let Some((other, unknown)) =
                    crate::host::other_share_dir_in_use(&inherited.permit)
                {
                    let seen = match unknown {
                        None => format!("{} is in use", other.display()),
                        Some(why) => format!(
                            "whether {} is in use cannot be told ({why}), so it counts as in use; \
                             once no process uses it, its owner or root may remove it",
                            other.display()
                        ),
                    };
                    Err(HostError::Inherited(format!(
                        "processes of another user work inside the permit inherited through \
                         {INHERITED_VAR} now ({seen}), and each user's processes would share its \
                         units apart from the others': run the processes inside one permit as one \
                         user"
                    )))
                } else if host.layout() == layout {
                    Ok(host)
                } else {
                    // Only a process of another tree could have set it: never work in more units
                    // than the parent holds.
                    Err(HostError::Inherited(format!(
                        "the directory {} in which the processes inside the permit inherited \
                         through {INHERITED_VAR} share it serves {}, not the permit's {layout}; \
                         remove it once no process uses it",
                        dir.display(),
                        host.layout()
                    )))
                }
            }
        };
        match host {
            Ok(host) => b.finish(Some(host), None, Some(inherited)),
            Err(e) => b.finish(None, Some(e), Some(inherited)),
        }
    }
}

/// GPUs of this host as far as the probe knows: the CUDA devices when the crate is built with
/// `cuda` and the probe finds some, else 1 (wgpu lists one GPU under several APIs, so its
/// adapters are no count of GPUs; set `GPU_TEST_PERMIT_GPUS` on multi-GPU wgpu hosts).
fn detected_gpus() -> usize {
    #[cfg(feature = "cuda")]
    {
        match crate::probe::probe(crate::probe::Backend::Cuda)
            .outcome
            .devices()
        {
            Some(d) => d.len().max(1),
            None => 1,
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        1
    }
}
