//! `hipobj cp`: objects to files and files to objects, each copy over the path `--transport`
//! gives it (`crate::transport`): plain HTTP, or RDMA through the transfer engine
//! (`hipobj::engine`): ranged GETs or a multipart upload, `--concurrency` transfers in flight over
//! a small ring of registered buffers, retries as the AWS SDKs do them, a progress bar by bytes
//! moved, and a closing line with the retries used. `--recursive` copies a prefix to a directory
//! and back. The exit status is 0 only when every byte arrived.

use crate::args::CpArgs;
use crate::credentials;
use crate::failure::{Failure, Retryable};
use crate::plain::{HttpStore, PlainRing};
use crate::s3::{ObjectPath, StoredChecksum, S3};
use crate::session::Session;
use crate::store::S3ObjectStore;
use crate::transport::Paths;
use crate::units::{mb_per_s, parse_range};
use hipobj::checksum::{Unchecked, Verdict};
use hipobj::engine::{
    self, Buffers, EngineError, FileSink, FileSource, Job, ObjectStore, PlainBuffers, Report,
    Settings, MIN_PART_SIZE,
};
use hipobj::rcv2::negotiate::{Choice, Protocol};
use hipobj::transport::{Direction, Mode, Path as Way};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// One object copy.
enum Copy {
    /// Object bytes `first .. first + len` to a file.
    Download {
        obj: ObjectPath,
        file: PathBuf,
        first: u64,
        len: u64,
        /// What the bytes are checked against, once the object's HEAD said (`None`: not asked
        /// yet, as for the objects of a listing).
        stored: Option<StoredChecksum>,
    },
    /// File bytes `first .. first + len` as an object.
    Upload {
        file: PathBuf,
        obj: ObjectPath,
        first: u64,
        len: u64,
    },
}

impl Copy {
    fn len(&self) -> u64 {
        match self {
            Copy::Download { len, .. } | Copy::Upload { len, .. } => *len,
        }
    }

    /// The object copied from or to.
    fn object(&self) -> &ObjectPath {
        match self {
            Copy::Download { obj, .. } | Copy::Upload { obj, .. } => obj,
        }
    }

    /// Whether the copy sends bytes (an upload).
    fn sending(&self) -> bool {
        matches!(self, Copy::Upload { .. })
    }

    fn name(&self) -> String {
        match self {
            Copy::Download { obj, file, .. } => format!("{obj} -> {}", file.display()),
            Copy::Upload { file, obj, .. } => format!("{} -> {obj}", file.display()),
        }
    }
}

fn io(path: &Path, e: std::io::Error) -> Failure {
    Failure::Io(format!("{}: {e}", path.display()))
}

fn progress(len: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The closing line of a copy (with how often failures cut the transfers in flight, if ever,
/// and what the end-to-end checks of its downloads found).
fn closing_line(what: &str, bytes: u64, secs: f64, how: &str, tally: &Tally) -> String {
    let cut = match tally.cuts {
        0 => String::new(),
        n => format!(", transfers in flight cut {n} times"),
    };
    format!(
        "{what}: {bytes} bytes in {secs:.3} s, {:.1} MB/s, {how}, {} retries{cut}{}",
        mb_per_s(bytes, secs),
        tally.retries,
        tally.checks()
    )
}

/// What the copies of one command did, summed.
#[derive(Default)]
struct Tally {
    retries: u64,
    cuts: u64,
    /// The downloads' check verdicts.
    verdicts: Vec<Verdict>,
}

impl Tally {
    fn add(&mut self, report: &Report) {
        self.retries += report.retries + report.checksum_retries;
        self.cuts += report.cuts;
        if report.checksum != Verdict::NotAsked {
            self.verdicts.push(report.checksum);
        }
    }

    /// ", CRC64NVME verified" (one download), ", 3 of 4 verified (unchecked: ...)" (several).
    fn checks(&self) -> String {
        match self.verdicts.as_slice() {
            [] => String::new(),
            [one] => format!(", {one}"),
            all => {
                let verified = all.iter().filter(|v| v.is_verified()).count();
                let why = all.iter().find(|v| !v.is_verified());
                match why {
                    None => format!(", {verified} of {} verified", all.len()),
                    Some(v) => format!(", {verified} of {} verified ({v})", all.len()),
                }
            }
        }
    }
}

/// `s3://BUCKET/PREFIX` of --recursive (the prefix may be empty).
fn prefix_of(arg: &str) -> Option<Result<ObjectPath, Failure>> {
    let rest = arg.strip_prefix("s3://")?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Some(Err(Failure::Usage(format!(
            "{arg}: expected s3://BUCKET/PREFIX"
        ))));
    }
    let mut key = key.to_owned();
    if !key.is_empty() && !key.ends_with('/') {
        key.push('/');
    }
    Some(Ok(ObjectPath {
        bucket: bucket.to_owned(),
        key,
    }))
}

/// What to copy: one object or file, or every one under a prefix or directory.
fn plan(args: &CpArgs, s3: &S3) -> Result<Vec<Copy>, Failure> {
    let (src, dst) = (args.source.as_str(), args.destination.as_str());
    if args.recursive {
        if args.range.is_some() {
            return Err(Failure::Usage(
                "--range copies one object, not --recursive".into(),
            ));
        }
        return match (prefix_of(src), prefix_of(dst)) {
            (Some(p), None) => list_objects(s3, &p?, Path::new(dst)),
            (None, Some(p)) => list_files(Path::new(src), &p?),
            _ => Err(Failure::Usage(
                "cp --recursive copies between s3://BUCKET/PREFIX and a directory".into(),
            )),
        };
    }
    match (ObjectPath::parse(src), ObjectPath::parse(dst)) {
        (Some(obj), None) => {
            let obj = obj?;
            let (size, stored) = s3.object_head(&obj)?;
            let (first, len) = selected(args.range.as_deref(), size)?;
            // The stored checksum is of the whole object: a range of it cannot be checked.
            let stored = if (first, len) == (0, size) {
                stored
            } else {
                Err(Unchecked::Range)
            };
            Ok(vec![Copy::Download {
                obj,
                file: PathBuf::from(dst),
                first,
                len,
                stored: Some(stored),
            }])
        }
        (None, Some(obj)) => {
            let file = PathBuf::from(src);
            let size = std::fs::metadata(&file).map_err(|e| io(&file, e))?.len();
            let (first, len) = selected(args.range.as_deref(), size)?;
            Ok(vec![Copy::Upload {
                file,
                obj: obj?,
                first,
                len,
            }])
        }
        _ => Err(Failure::Usage(
            "cp copies between s3://BUCKET/KEY and a file: exactly one side must be s3://".into(),
        )),
    }
}

/// (first, len) of `--range` over `size` bytes, or all of them.
fn selected(range: Option<&str>, size: u64) -> Result<(u64, u64), Failure> {
    match range {
        Some(r) => {
            let (a, b) = parse_range(r, size).map_err(Failure::Usage)?;
            Ok((a, b - a + 1))
        }
        None => Ok((0, size)),
    }
}

fn list_objects(s3: &S3, prefix: &ObjectPath, dir: &Path) -> Result<Vec<Copy>, Failure> {
    let mut copies = Vec::new();
    for (key, size) in s3.list(&prefix.bucket, &prefix.key)? {
        let rel = &key[prefix.key.len().min(key.len())..];
        if rel.is_empty() || key.ends_with('/') {
            continue; // a "directory" marker
        }
        if rel.split('/').any(|c| c == ".." || c == ".") {
            return Err(Failure::Usage(format!(
                "s3://{}/{key}: a key with '.' or '..' would leave {}",
                prefix.bucket,
                dir.display()
            )));
        }
        copies.push(Copy::Download {
            obj: ObjectPath {
                bucket: prefix.bucket.clone(),
                key: key.clone(),
            },
            file: dir.join(rel),
            first: 0,
            len: size,
            stored: None,
        });
    }
    Ok(copies)
}

fn list_files(dir: &Path, prefix: &ObjectPath) -> Result<Vec<Copy>, Failure> {
    let mut copies = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| io(&d, e))? {
            let entry = entry.map_err(|e| io(&d, e))?;
            let path = entry.path();
            let meta = std::fs::metadata(&path).map_err(|e| io(&path, e))?;
            if meta.is_dir() {
                pending.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(dir)
                .ok()
                .and_then(Path::to_str)
                .ok_or_else(|| Failure::Usage(format!("{}: not a UTF-8 name", path.display())))?;
            copies.push(Copy::Upload {
                obj: ObjectPath {
                    bucket: prefix.bucket.clone(),
                    key: format!("{}{rel}", prefix.key),
                },
                file: path.clone(),
                first: 0,
                len: meta.len(),
            });
        }
    }
    copies.sort_by_key(Copy::name);
    Ok(copies)
}

/// The engine's settings from the arguments: an upload's parts are at least 5 MiB. Over RDMA
/// (`session`), a transfer that may be hipobj-rc-v2 moves at most 2^31 - 1 bytes, and to an
/// endpoint that speaks it an upload up to that size goes as ONE PUT (v2 servers need not honour
/// an UploadPart's query: elbencho's s3rdma-server stores each part as the whole object).
fn settings(args: &CpArgs, session: Option<&Session>, s3: &S3, upload: bool) -> Settings {
    let concurrency = args.concurrency.map(usize::from).unwrap_or_else(|| {
        session.map_or_else(
            || hipobj::env::EnvConfig::from_env().max_transfers,
            Session::max_transfers,
        )
    });
    let mut s = Settings::with_concurrency(concurrency);
    s.part_size = if upload {
        args.part_size.max(MIN_PART_SIZE)
    } else {
        args.part_size
    };
    s.multipart_threshold = s.part_size;
    let negotiation = s3.negotiation();
    if let (Some(max), Some(_)) = (negotiation.max_transfer(s3.endpoint()), session) {
        s.part_size = s.part_size.min(max);
        s.multipart_threshold = if upload && negotiation.first(s3.endpoint()) == Protocol::V2 {
            max
        } else {
            s.part_size
        };
    }
    s.retry = s3.retry_policy().clone();
    s
}

pub fn run(args: &CpArgs) -> Result<(), Failure> {
    let creds = credentials::resolve(&args.endpoint.credentials.sources())?;
    let s3 = S3::new(&args.endpoint.endpoint, creds)?
        .with_protocol(args.endpoint.protocol.rdma_protocol);
    let copies = plan(args, &s3)?;
    let mut endpoint = args.endpoint.clone();
    if args.http_fallback {
        endpoint.transport = Mode::Auto;
    }
    let paths = Paths::open(&endpoint, args.concurrency.map(usize::from))?;
    if let Some(session) = &paths.session {
        learn_protocol(&s3, session, &copies)?;
    }
    let cancel = crate::interrupt::install();
    let total: u64 = copies.iter().map(Copy::len).sum();
    let bar = progress(total, args.quiet);
    let t0 = Instant::now();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for copy in &copies {
        match one(args, &s3, &paths, copy, &bar, cancel) {
            Ok(report) => tally.add(&report),
            Err((f, n)) => {
                tally.retries += n;
                bar.suspend(|| eprintln!("hipobj: {}: {f}", copy.name()));
                failures.push(f);
                if cancel.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
            }
        }
    }
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    let what = match copies.as_slice() {
        [one] => one.name(),
        all => format!(
            "{} -> {}: {} of {} files",
            args.source,
            args.destination,
            all.len() - failures.len(),
            all.len()
        ),
    };
    if let Some(first) = failures.into_iter().next() {
        eprintln!("hipobj: {what}, {} retries", tally.retries);
        return Err(first);
    }
    println!("{}", closing_line(&what, total, secs, &paths.how(), &tally));
    Ok(())
}

/// Before uploads are cut into parts, under `auto`: what the endpoint speaks (one probe
/// request), so that the parts fit the protocol (`settings`).
fn learn_protocol(s3: &S3, session: &Session, copies: &[Copy]) -> Result<(), Failure> {
    let bucket = copies.iter().find_map(|c| match c {
        Copy::Upload { obj, len, .. } if *len > 0 => Some(obj.bucket.as_str()),
        _ => None,
    });
    let Some(bucket) = bucket else {
        return Ok(());
    };
    let negotiation = s3.negotiation();
    if negotiation.choice() != Choice::Auto || negotiation.spoken(s3.endpoint()).is_some() {
        return Ok(());
    }
    let probed = session
        .buffer(1)
        .and_then(|byte| crate::rdma::probe(s3, bucket, |req| byte.transfer(0, 1, req)));
    match probed {
        Ok((p, status)) => tracing::debug!(protocol = ?p, status, "probed the endpoint"),
        Err(f) => tracing::debug!("probing the endpoint: {f}"),
    }
    Ok(())
}

type CopyResult = Result<Report, (Failure, u64)>;

/// One copy over the path the decision gives it (`Paths::transport`), its outcome recorded: over
/// RDMA through the engine, or over plain HTTP (also after a 501 under `auto`, which then takes
/// plain HTTP to this endpoint from now on). Its report; a failure with the retries it used.
fn one(
    args: &CpArgs,
    s3: &S3,
    paths: &Paths,
    copy: &Copy,
    bar: &ProgressBar,
    cancel: &AtomicBool,
) -> CopyResult {
    let direction = match copy {
        Copy::Download { .. } => Direction::Get,
        Copy::Upload { .. } => Direction::Put,
    };
    let destination = Paths::destination(&args.endpoint);
    let t = &paths.transport;
    let mut ticket = t.pick(s3.endpoint(), copy.len(), direction, destination);
    if ticket.path() == Way::Rdma {
        let session = paths.session.as_ref().ok_or_else(|| {
            let why = t
                .missing_device()
                .unwrap_or_else(|| "no RDMA session".into());
            (Failure::NoNic(why), 0)
        })?;
        match over_rdma(args, s3, session, copy, bar, cancel) {
            Ok(report) => {
                t.record(&ticket, copy.len());
                return Ok(report);
            }
            Err((Failure::RdmaDeclined(m), _)) if t.mode() != Mode::Rdma => {
                if t.declined(s3.endpoint()) {
                    bar.suspend(|| eprintln!("{m}: copying over plain HTTP"));
                }
                ticket = t.pick(s3.endpoint(), copy.len(), direction, destination);
            }
            Err(e) => return Err(e),
        }
    }
    let report = over_http(args, s3, copy, bar, cancel)?;
    t.record(&ticket, copy.len());
    Ok(report)
}

/// What a download is checked against (None for an upload).
fn stored(args: &CpArgs, s3: &S3, copy: &Copy) -> Result<Option<StoredChecksum>, Failure> {
    let Copy::Download { obj, stored, .. } = copy else {
        return Ok(None);
    };
    Ok(Some(match stored {
        _ if !args.checksum_mode.checks() => Err(Unchecked::Off),
        Some(stored) => *stored,
        None => s3.object_head(obj)?.1,
    }))
}

/// One copy through the engine over RDMA (the session's registered buffers): its report; a
/// failure with the retries it used.
fn over_rdma(
    args: &CpArgs,
    s3: &S3,
    session: &Session,
    copy: &Copy,
    bar: &ProgressBar,
    cancel: &AtomicBool,
) -> CopyResult {
    let mut settings = settings(args, Some(session), s3, copy.sending());
    settings.checksum = stored(args, s3, copy).map_err(|f| (f, 0))?;
    let progress = |n: u64| bar.inc(n);
    let job = Job {
        settings,
        progress: &progress,
        cancel,
    };
    let store = S3ObjectStore {
        s3,
        runtime: session.runtime(),
        object: copy.object(),
    };
    through_engine(s3, copy, &store, session, &job).map_err(|e| engine_failure(e, copy))
}

/// One copy through the engine over plain HTTP (ranged GETs, PUTs or a multipart upload, from a
/// ring of plain host buffers): its report; a failure with the retries it used.
fn over_http(
    args: &CpArgs,
    s3: &S3,
    copy: &Copy,
    bar: &ProgressBar,
    cancel: &AtomicBool,
) -> CopyResult {
    let mut settings = settings(args, None, s3, copy.sending());
    settings.checksum = stored(args, s3, copy).map_err(|f| (f, 0))?;
    let progress = |n: u64| bar.inc(n);
    let job = Job {
        settings,
        progress: &progress,
        cancel,
    };
    let store = HttpStore {
        s3,
        object: copy.object(),
        memory: &PlainRing,
    };
    through_engine(s3, copy, &store, &PlainBuffers, &job).map_err(|e| engine_failure(e, copy))
}

/// `copy` through the engine with `store` and the ring `buffers`.
fn through_engine<S: ObjectStore<Error = Retryable>>(
    s3: &S3,
    copy: &Copy,
    store: &S,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> Result<Report, EngineError<Retryable>> {
    match copy {
        Copy::Download {
            file, first, len, ..
        } => download(store, buffers, file, *first, *len, job),
        Copy::Upload {
            file,
            obj,
            first,
            len,
        } => upload(s3, obj, store, buffers, file, *first, *len, job),
    }
}

/// What a failed engine run means for the user, and the retries it used.
fn engine_failure(e: EngineError<Retryable>, copy: &Copy) -> (Failure, u64) {
    match e {
        EngineError::Store { error, retries } => {
            let f = match error.failure {
                Failure::Transfer(m) if retries > 0 => {
                    Failure::Transfer(format!("{m} (after {retries} retries)"))
                }
                Failure::Http(m) if retries > 0 => {
                    Failure::Http(format!("{m} (after {retries} retries)"))
                }
                f => f,
            };
            (f, retries)
        }
        EngineError::Io(e) => (Failure::Io(format!("{}: {e}", copy.name())), 0),
        EngineError::Library(e) => (Failure::of_library(&e, &copy.name()), 0),
        e
        @ (EngineError::Short { .. } | EngineError::Changed { .. } | EngineError::Checksum(_)) => {
            (Failure::Transfer(format!("{}: {e}", copy.name())), 0)
        }
        EngineError::Cancelled { retries } => (
            Failure::Transfer(format!(
                "{}: interrupted; nothing of an unfinished upload remains",
                copy.name()
            )),
            retries,
        ),
    }
}

fn download<S: ObjectStore<Error = Retryable>>(
    store: &S,
    buffers: &dyn Buffers,
    file: &Path,
    first: u64,
    len: u64,
    job: &Job<'_>,
) -> Result<Report, EngineError<Retryable>> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(EngineError::Io)?;
    }
    let sink = FileSink::create(file, len).map_err(EngineError::Io)?;
    let report = engine::download(store, first, len, &sink, buffers, job)?;
    sink.finish().map_err(EngineError::Io)?;
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn upload<S: ObjectStore<Error = Retryable>>(
    s3: &S3,
    obj: &ObjectPath,
    store: &S,
    buffers: &dyn Buffers,
    file: &Path,
    first: u64,
    len: u64,
    job: &Job<'_>,
) -> Result<Report, EngineError<Retryable>> {
    let fatal = |failure| EngineError::Store {
        error: Retryable::new(failure, engine::ErrorClass::Fatal),
        retries: 0,
    };
    if len == 0 {
        // Nothing for the engine to move: an empty object in one plain-HTTP PUT.
        s3.put_plain(obj, Vec::new()).map_err(fatal)?;
        return Ok(Report::default());
    }
    let source = FileSource::open(file, first).map_err(EngineError::Io)?;
    let report = engine::upload(store, &source, len, buffers, job)?;
    if report.multipart {
        // The object has all the bytes (a server that ignored the parts' query would have kept
        // only one part, or none).
        let size = s3.object_size(obj).map_err(fatal)?;
        if size != len {
            return Err(fatal(Failure::Transfer(format!(
                "{obj}: the completed multipart upload has {size} bytes, not {len}"
            ))));
        }
    }
    Ok(report)
}
