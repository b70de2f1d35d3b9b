//! `hipobj cp`: one object to a file (GET, in ranges of `--chunk` bytes) or one file to an object
//! (PUT), over RDMA, with a progress bar and a closing line.

use crate::args::CpArgs;
use crate::credentials;
use crate::failure::Failure;
use crate::rdma::RdmaRequest;
use crate::s3::{ObjectPath, S3};
use crate::session::Session;
use crate::units::{mb_per_s, parse_range};
use hipobj::runtime::TransferKind;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Instant;

enum Direction {
    Download(ObjectPath, String),
    Upload(String, ObjectPath),
}

fn direction(args: &CpArgs) -> Result<Direction, Failure> {
    match (
        ObjectPath::parse(&args.source),
        ObjectPath::parse(&args.destination),
    ) {
        (Some(src), None) => Ok(Direction::Download(src?, args.destination.clone())),
        (None, Some(dst)) => Ok(Direction::Upload(args.source.clone(), dst?)),
        _ => Err(Failure::Usage(
            "cp copies between s3://BUCKET/KEY and a file: exactly one side must be s3://".into(),
        )),
    }
}

fn progress(len: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The closing line of a copy.
fn closing_line(what: &str, bytes: u64, secs: f64, how: &str) -> String {
    format!(
        "{what}: {bytes} bytes in {secs:.3} s, {:.1} MB/s, {how}",
        mb_per_s(bytes, secs)
    )
}

pub fn run(args: &CpArgs) -> Result<(), Failure> {
    let dir = direction(args)?;
    let creds = credentials::resolve(&args.endpoint.credentials)?;
    let s3 = S3::new(&args.endpoint.endpoint, creds)?;
    match dir {
        Direction::Download(obj, file) => download(args, &s3, &obj, &file),
        Direction::Upload(file, obj) => upload(args, &s3, &file, &obj),
    }
}

fn io(path: &str, e: std::io::Error) -> Failure {
    Failure::Io(format!("{path}: {e}"))
}

fn download(args: &CpArgs, s3: &S3, obj: &ObjectPath, file: &str) -> Result<(), Failure> {
    let size = s3.object_size(obj)?;
    let (first, last) = match &args.range {
        Some(r) => parse_range(r, size).map_err(Failure::Usage)?,
        None if size == 0 => {
            return Err(Failure::Usage(format!(
                "{obj} is empty: nothing to move over RDMA"
            )))
        }
        None => (0, size - 1),
    };
    let total = last - first + 1;
    let session = Session::open(args.endpoint.nic.as_deref(), args.endpoint.gpu)?;
    let chunk = args.chunk.min(total);
    let chunk_len =
        usize::try_from(chunk).map_err(|_| Failure::Usage("--chunk too large".into()))?;
    let buffer = session.buffer(chunk_len)?;
    let mut out = std::fs::File::create(file).map_err(|e| io(file, e))?;
    let bar = progress(total, args.quiet);
    let t0 = Instant::now();
    let mut at = first;
    let mut fell_back = false;
    while at <= last {
        let end = (at + chunk - 1).min(last);
        let len = (end - at + 1) as usize;
        let mut req = RdmaRequest::new(s3, TransferKind::Get, obj, Some((at, end)));
        let data = match buffer.transfer(TransferKind::Get, 0, len, &mut req) {
            Ok(()) => {
                if let Some(n) = req.bytes_transferred().filter(|&n| n != len as u64) {
                    return Err(Failure::Transfer(format!(
                        "GET {obj} bytes {at}-{end}: the server wrote {n} bytes, expected {len}"
                    )));
                }
                match buffer.host_bytes(len) {
                    Some(b) => out.write_all(b).map_err(|e| io(file, e))?,
                    None => out.write_all(&buffer.read(len)?).map_err(|e| io(file, e))?,
                }
                None
            }
            Err(e) => match req.failure(&e) {
                Failure::RdmaDeclined(m) if args.http_fallback => {
                    bar.suspend(|| eprintln!("{m}: falling back to plain HTTP"));
                    Some(s3.get_plain(obj, Some((at, last)))?)
                }
                f => return Err(f),
            },
        };
        if let Some(body) = data {
            out.write_all(&body).map_err(|e| io(file, e))?;
            bar.inc(body.len() as u64);
            fell_back = true;
            break;
        }
        bar.inc(len as u64);
        at = end + 1;
    }
    out.flush().map_err(|e| io(file, e))?;
    bar.finish_and_clear();
    let how = if fell_back {
        "plain HTTP (server declined RDMA)".to_string()
    } else {
        format!("RDMA via {}", session.nic())
    };
    println!(
        "{}",
        closing_line(
            &format!("{obj} -> {file}"),
            total,
            t0.elapsed().as_secs_f64(),
            &how
        )
    );
    Ok(())
}

fn read_file(path: &str, range: Option<&str>) -> Result<Vec<u8>, Failure> {
    let mut f = std::fs::File::open(path).map_err(|e| io(path, e))?;
    let size = f.metadata().map_err(|e| io(path, e))?.len();
    let (first, last) = match range {
        Some(r) => parse_range(r, size).map_err(Failure::Usage)?,
        None if size == 0 => {
            return Err(Failure::Usage(format!(
                "{path} is empty: nothing to move over RDMA"
            )))
        }
        None => (0, size - 1),
    };
    f.seek(SeekFrom::Start(first)).map_err(|e| io(path, e))?;
    let mut data = Vec::new();
    f.take(last - first + 1)
        .read_to_end(&mut data)
        .map_err(|e| io(path, e))?;
    Ok(data)
}

fn upload(args: &CpArgs, s3: &S3, file: &str, obj: &ObjectPath) -> Result<(), Failure> {
    let data = read_file(file, args.range.as_deref())?;
    let total = data.len() as u64;
    let session = Session::open(args.endpoint.nic.as_deref(), args.endpoint.gpu)?;
    let mut buffer = session.buffer(data.len())?;
    buffer.fill(&data)?;
    let bar = progress(total, args.quiet);
    let t0 = Instant::now();
    let mut req = RdmaRequest::new(s3, TransferKind::Put, obj, None);
    let how = match buffer.transfer(TransferKind::Put, 0, data.len(), &mut req) {
        Ok(()) => format!("RDMA via {}", session.nic()),
        Err(e) => match req.failure(&e) {
            Failure::RdmaDeclined(m) if args.http_fallback => {
                bar.suspend(|| eprintln!("{m}: falling back to plain HTTP"));
                drop(buffer);
                s3.put_plain(obj, data)?;
                "plain HTTP (server declined RDMA)".to_string()
            }
            f => return Err(f),
        },
    };
    bar.inc(total);
    bar.finish_and_clear();
    println!(
        "{}",
        closing_line(
            &format!("{file} -> {obj}"),
            total,
            t0.elapsed().as_secs_f64(),
            &how
        )
    );
    Ok(())
}
