//! Starts the real `hipobj-server` binary on 127.0.0.1 with a temporary data directory and talks
//! HTTP/1.1 to it with a small hand-written blocking client: plain S3, token requests on a host
//! without RDMA (501 / 400), the stats endpoint and a clean SIGTERM exit, all signed with the test
//! identity (see `http_security.rs` for the section 9 rules).

mod common;

use common::{pattern, Server};

fn md5_hex(data: &[u8]) -> String {
    // The ETag the server must report: computed independently with a tiny MD5 below.
    md5::hex(data)
}

/// A small self-contained MD5 (RFC 1321), so the test does not trust the server's hashing crate.
mod md5 {
    pub fn hex(data: &[u8]) -> String {
        let s: [u32; 64] = [
            7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20,
            5, 9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
            6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
        ];
        let k: Vec<u32> = (0..64)
            .map(|i| ((i as f64 + 1.0).sin().abs() * 4294967296.0) as u32)
            .collect();
        let (mut a0, mut b0, mut c0, mut d0) =
            (0x67452301u32, 0xefcdab89u32, 0x98badcfeu32, 0x10325476u32);
        let mut msg = data.to_vec();
        let bit_len = (data.len() as u64).wrapping_mul(8);
        msg.push(0x80);
        while msg.len() % 64 != 56 {
            msg.push(0);
        }
        msg.extend_from_slice(&bit_len.to_le_bytes());
        for block in msg.chunks(64) {
            let m: Vec<u32> = block
                .chunks(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
            for i in 0..64 {
                let (f, g) = match i / 16 {
                    0 => ((b & c) | (!b & d), i),
                    1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                    2 => (b ^ c ^ d, (3 * i + 5) % 16),
                    _ => (c ^ (b | !d), (7 * i) % 16),
                };
                let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
                a = d;
                d = c;
                c = b;
                b = b.wrapping_add(f.rotate_left(s[i]));
            }
            a0 = a0.wrapping_add(a);
            b0 = b0.wrapping_add(b);
            c0 = c0.wrapping_add(c);
            d0 = d0.wrapping_add(d);
        }
        [a0, b0, c0, d0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// A token as the client library mints it (docs/protocol.md section 2), hex encoded.
fn token_hex(transport: u8, length: u64, pairing: u16) -> String {
    let mut b = Vec::with_capacity(44);
    b.push(transport);
    b.extend_from_slice(&0x1234u32.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1]);
    b.extend_from_slice(&0x99u32.to_le_bytes());
    b.extend_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
    b.extend_from_slice(&length.to_le_bytes());
    b.push(1);
    b.extend_from_slice(&pairing.to_le_bytes());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn plain_s3_round_trip() {
    let server = Server::start(&[]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    assert_eq!(
        server.request("PUT", "/bkt", &[], b"").status,
        409,
        "bucket exists"
    );

    let data = pattern(3 * 1024 * 1024 + 17);
    let put = server.request("PUT", "/bkt/dir/obj.bin", &[], &data);
    assert_eq!(put.status, 200, "{}", put.text());
    let etag = format!("\"{}\"", md5_hex(&data));
    assert_eq!(put.header("etag"), Some(etag.as_str()));

    let got = server.get("/bkt/dir/obj.bin");
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len(), data.len());
    assert!(got.body == data, "GET body differs");
    assert_eq!(got.header("etag"), Some(etag.as_str()));
    assert!(got.header("x-amz-rdma-reply").is_none());

    let ranged = server.request(
        "GET",
        "/bkt/dir/obj.bin",
        &[("range", "bytes=1000-1999".into())],
        b"",
    );
    assert_eq!(ranged.status, 206);
    assert_eq!(ranged.body, data[1000..2000].to_vec());
    assert_eq!(
        ranged.header("content-range"),
        Some(format!("bytes 1000-1999/{}", data.len()).as_str())
    );
    let suffix = server.request(
        "GET",
        "/bkt/dir/obj.bin",
        &[("range", "bytes=-5".into())],
        b"",
    );
    assert_eq!(suffix.status, 206);
    assert_eq!(suffix.body, data[data.len() - 5..].to_vec());
    let beyond = server.request(
        "GET",
        "/bkt/dir/obj.bin",
        &[("range", "bytes=99999999-".into())],
        b"",
    );
    assert_eq!(beyond.status, 416);

    let head = server.request("HEAD", "/bkt/dir/obj.bin", &[], b"");
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(data.len().to_string().as_str())
    );
    assert_eq!(head.header("etag"), Some(etag.as_str()));

    assert_eq!(
        server.request("PUT", "/bkt/a.txt", &[], b"alpha").status,
        200
    );
    assert_eq!(
        server.request("PUT", "/bkt/dir/two", &[], b"").status,
        200,
        "empty object"
    );
    assert_eq!(server.get("/bkt/dir/two").body, b"");

    let list = server.get("/bkt?list-type=2");
    assert_eq!(list.status, 200);
    let xml = list.text();
    for key in ["a.txt", "dir/obj.bin", "dir/two"] {
        assert!(xml.contains(&format!("<Key>{key}</Key>")), "{xml}");
    }
    let grouped = server.get("/bkt?list-type=2&delimiter=%2F").text();
    assert!(grouped.contains("<Prefix>dir/</Prefix>"), "{grouped}");
    assert!(!grouped.contains("<Key>dir/obj.bin</Key>"), "{grouped}");
    let under = server.get("/bkt?list-type=2&prefix=dir%2F").text();
    assert!(
        under.contains("<Key>dir/two</Key>") && !under.contains("<Key>a.txt</Key>"),
        "{under}"
    );
    let page = server.get("/bkt?list-type=2&max-keys=1").text();
    assert!(page.contains("<IsTruncated>true</IsTruncated>"), "{page}");
    assert!(page.contains("<NextContinuationToken>"), "{page}");

    assert_eq!(
        server
            .request("DELETE", "/bkt/dir/obj.bin", &[], b"")
            .status,
        204
    );
    let gone = server.get("/bkt/dir/obj.bin");
    assert_eq!(gone.status, 404);
    assert!(gone.text().contains("NoSuchKey"));
    assert_eq!(server.get("/nobucket/x").status, 404);

    let stats = server.stats();
    assert!(stats.contains("\"http_puts\":3"), "{stats}");
    assert!(stats.contains("\"http_gets\":4"), "{stats}");
    assert!(stats.contains("\"token_requests\":0"), "{stats}");

    let status = server.stop();
    assert!(status.success(), "exit after SIGTERM: {status:?}");
}

#[test]
fn token_requests_without_rdma() {
    // A device that does not exist: the server must still start, with RDMA disabled.
    let server = Server::start(&["--device", "no-such-rdma-device0"]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    assert_eq!(server.request("PUT", "/bkt/obj", &[], b"hello").status, 200);

    let token = token_hex(1, 4096, 0);
    let get = server.request(
        "GET",
        "/bkt/obj",
        &[("x-amz-rdma-token", token.clone())],
        b"",
    );
    assert_eq!(get.status, 501);
    assert_eq!(get.header("x-amz-rdma-reply"), Some("501"));

    let put = server.request(
        "PUT",
        "/bkt/new",
        &[("x-amz-rdma-token", token.clone())],
        b"",
    );
    assert_eq!(put.status, 501);
    assert_eq!(put.header("x-amz-rdma-reply"), Some("501"));
    assert_eq!(
        server.get("/bkt/new").status,
        404,
        "a refused PUT stores nothing"
    );

    let suffixed = format!("{token}:{:016x}:{:016x}", 0x7f00_0000_1000u64, 4096u64);
    let get = server.request("GET", "/bkt/obj", &[("x-amz-rdma-token", suffixed)], b"");
    assert_eq!(get.status, 501, "a matching legacy suffix is accepted");

    let dc = server.request(
        "GET",
        "/bkt/obj",
        &[("x-amz-rdma-token", token_hex(0, 4096, 0))],
        b"",
    );
    assert_eq!(dc.status, 501);
    assert_eq!(dc.header("x-amz-rdma-reply"), Some("501"));

    for bad in [
        "xyz".to_string(),
        token[..86].to_string(),
        format!("{token}00"),
        token_hex(2, 4096, 0),
        format!("{token}:{:016x}:{:016x}", 0x7f00_0000_1000u64, 4095u64),
    ] {
        let r = server.request("GET", "/bkt/obj", &[("x-amz-rdma-token", bad.clone())], b"");
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.header("x-amz-rdma-reply"), Some("400"), "{bad}");
    }

    // Requests without a token still work.
    assert_eq!(server.get("/bkt/obj").body, b"hello");

    let stats = server.stats();
    assert!(stats.contains("\"token_requests\":9"), "{stats}");
    assert!(stats.contains("\"replies_501\":4"), "{stats}");
    assert!(stats.contains("\"replies_400\":5"), "{stats}");
    assert!(stats.contains("\"pairings_created\":0"), "{stats}");
    assert!(server.stop().success());
}
