//! Run-time loading shared by the GPU runtimes' symbol tables (`sys` for HIP, `cuda_sys` for the
//! CUDA driver): open the first library of a list of sonames, then look up required and optional
//! entry points. The tables themselves stay in their modules; only the loading is here.

use super::error::HipLoadError;
use libloading::Library;

/// Open the first of `names` that loads; the library and the name that opened it. `what` names
/// the runtime in the debug log of a candidate that did not load.
///
/// Opening a library runs its initialisers, and `dlerror` isn't thread-safe: callers serialise
/// this (see `amd::load`, `cuda::load`).
pub fn open_first<'n>(
    names: &[&'n str],
    what: &'static str,
) -> Result<(Library, &'n str), HipLoadError> {
    let mut reason = String::from("no candidate names");
    for name in names {
        // SAFETY: loading a GPU runtime runs its ELF initialisers, which only set up that
        // runtime's own state; callers serialise loading, as libloading asks.
        match unsafe { Library::new(name) } {
            Ok(library) => return Ok((library, name)),
            Err(err) => {
                tracing::debug!(library = name, error = %err, "{what} candidate did not load");
                reason = err.to_string();
            }
        }
    }
    Err(HipLoadError::LibraryNotFound {
        tried: names.iter().map(|n| (*n).to_owned()).collect(),
        reason,
    })
}

/// Look up a required symbol: a missing one fails the load.
///
/// # Safety
/// `T` must be the C signature of `name` as its library declares it.
pub unsafe fn required<T: Copy>(
    lib: &Library,
    soname: &str,
    name: &'static str,
) -> Result<T, HipLoadError> {
    // SAFETY: the caller guarantees `T` matches the symbol's type.
    match unsafe { lib.get::<T>(name.as_bytes()) } {
        Ok(symbol) => Ok(*symbol),
        Err(_) => Err(HipLoadError::MissingSymbol {
            library: soname.to_owned(),
            symbol: name,
        }),
    }
}

/// Look up an optional symbol (checked at each use).
///
/// # Safety
/// `T` must be the C signature of `name` as its library declares it.
pub unsafe fn optional<T: Copy>(lib: &Library, name: &'static str) -> Option<T> {
    // SAFETY: the caller guarantees `T` matches the symbol's type.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .ok()
        .map(|symbol| *symbol)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_candidate_that_loads_is_library_not_found_with_every_name_tried() {
        let names = [
            "libhipobj-no-such-runtime.so.1",
            "libhipobj-no-such-runtime.so",
        ];
        match open_first(&names, "test runtime") {
            Err(HipLoadError::LibraryNotFound { tried, reason }) => {
                assert_eq!(tried, names);
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("unexpected error {other:?}"),
            Ok(_) => panic!("a made-up soname loaded"),
        }
    }

    #[test]
    fn a_missing_required_symbol_names_library_and_symbol() {
        let (lib, soname) = open_first(&["libc.so.6"], "test runtime").expect("libc loads");
        // SAFETY: the symbol does not exist, so the type is never used.
        let missing = unsafe { required::<unsafe extern "C" fn()>(&lib, soname, "hipobj_nope") };
        match missing {
            Err(HipLoadError::MissingSymbol { library, symbol }) => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(symbol, "hipobj_nope");
            }
            _ => panic!("a missing symbol resolved"),
        }
        // SAFETY: `getpid` is `pid_t getpid(void)`; only its presence is checked here.
        let present = unsafe { optional::<unsafe extern "C" fn() -> i32>(&lib, "getpid") };
        assert!(present.is_some());
    }
}
