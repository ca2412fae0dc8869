//! The explorer's "this target's profile" switch: when the agent keeps a calibrated profile for a target (the live
//! panel's "Calibrate this target"), the explorer can run its scenario on that profile. The profile goes into the
//! scenario itself, so share links and pinned comparisons carry it like any other profile.

use leptos::prelude::*;
use shared::scenario::Scenario;

use crate::live::calibrate::{Calibration, uses_profile, with_profile};
use crate::model::state::Explorer;

/// One button per calibrated target ("Use sim's calibrated profile"), the one in use marked; nothing when no
/// target has a profile (or the page has no agent).
#[component]
pub fn TargetProfileSwitch(ex: Explorer) -> impl IntoView {
    let cal = use_context::<Calibration>()?;
    let profiles = cal.profiles;
    Some(view! {
        <Show when=move || profiles.with(|p| !p.is_empty())>
            <div class="target-profiles" data-target-profiles="">
                <span class="field-label">"Profile measured on a target"</span>
                {move || {
                    let sc = Scenario::from_value(ex.json.get()).ok();
                    profiles.get().into_iter().map(|p| {
                        let active = uses_profile(sc.as_ref(), &p.profile);
                        let label = if active {
                            format!("Using {}'s calibrated profile", p.target)
                        } else {
                            format!("Use {}'s calibrated profile", p.target)
                        };
                        let profile = p.profile.clone();
                        view! {
                            <button
                                class="btn small"
                                class:active=active
                                data-action="use-target-profile"
                                data-target=p.target.clone()
                                data-active=active.to_string()
                                aria-pressed=active.to_string()
                                title=format!("Run this scenario on the profile calibrated on target {} (decode and prefill costs measured there)", p.target)
                                on:click=move |_| ex.set_scenario(&with_profile(ex.scenario(), &profile))
                            >
                                {label}
                            </button>
                        }
                    }).collect_view()
                }}
            </div>
        </Show>
    })
}
