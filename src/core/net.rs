//! Outgoing TCP connections as the proxy and its health checks open them.

use std::net::SocketAddr;

use tokio::net::{TcpSocket, TcpStream};

/// Connects to `addr` with Nagle off, from `bind` if given (`upstream_bind_config`).
pub async fn connect_tcp(addr: SocketAddr, bind: Option<SocketAddr>) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_nodelay(true)?;
    if let Some(source) = bind {
        socket.bind(source)?;
    }
    socket.connect(addr).await
}

/// Envoy's delay before the next address is tried while an attempt is still connecting.
pub const HAPPY_EYEBALLS_DELAY: std::time::Duration = std::time::Duration::from_millis(300);

/// The order Envoy's happy eyeballs tries an endpoint's addresses in (its default config,
/// `first_address_family_count` 1): the families alternate, starting with the family of
/// the first address, each family keeping its own order (RFC 8305 §4).
pub fn happy_eyeballs_order(addresses: &[SocketAddr]) -> Vec<SocketAddr> {
    let Some(first) = addresses.first() else { return Vec::new() };
    let (mut same, mut other): (std::collections::VecDeque<_>, std::collections::VecDeque<_>) =
        addresses.iter().copied().partition(|a| a.is_ipv4() == first.is_ipv4());
    let mut ordered = Vec::with_capacity(addresses.len());
    loop {
        match (same.pop_front(), other.pop_front()) {
            (None, None) => return ordered,
            (a, b) => ordered.extend(a.into_iter().chain(b)),
        }
    }
}

/// Connects to the first of `addresses` that accepts, as Envoy's happy eyeballs connection
/// does for an endpoint with `additional_addresses`: in [`happy_eyeballs_order`], each next
/// attempt starting when the previous one failed or [`HAPPY_EYEBALLS_DELAY`] after it began,
/// the first to connect winning (the others are dropped). One address is a plain connect.
pub async fn connect_any(
    addresses: &[SocketAddr],
    bind: impl Fn(SocketAddr) -> Option<SocketAddr>,
) -> std::io::Result<TcpStream> {
    use futures::stream::{FuturesUnordered, StreamExt};
    let ordered = happy_eyeballs_order(addresses);
    let mut next = ordered.into_iter();
    let mut attempts = FuturesUnordered::new();
    let mut last_error = std::io::Error::new(std::io::ErrorKind::NotFound, "no address to connect to");
    loop {
        if attempts.is_empty() {
            match next.next() {
                Some(address) => attempts.push(connect_tcp(address, bind(address))),
                None => return Err(last_error),
            }
        }
        let delay = tokio::time::sleep(HAPPY_EYEBALLS_DELAY);
        tokio::select! {
            biased;
            result = attempts.next() => match result {
                Some(Ok(stream)) => return Ok(stream),
                Some(Err(error)) => {
                    last_error = error;
                    // A failure starts the next attempt at once.
                    if let Some(address) = next.next() {
                        attempts.push(connect_tcp(address, bind(address)));
                    }
                }
                None => {}
            },
            () = delay => {
                if let Some(address) = next.next() {
                    attempts.push(connect_tcp(address, bind(address)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn happy_eyeballs_alternates_families_from_the_first_address() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let given = [a("[fd00::1]:80"), a("[fd00::2]:80"), a("10.0.0.1:80"), a("10.0.0.2:80"), a("10.0.0.3:80")];
        let expected = [a("[fd00::1]:80"), a("10.0.0.1:80"), a("[fd00::2]:80"), a("10.0.0.2:80"), a("10.0.0.3:80")];
        assert_eq!(happy_eyeballs_order(&given), expected);
        assert_eq!(happy_eyeballs_order(&given[2..3]), [a("10.0.0.1:80")]);
    }

    #[tokio::test]
    async fn the_first_address_that_accepts_is_connected_after_one_that_refuses() {
        let refusing = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // released
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let accepting = listener.local_addr().unwrap();
        let stream = connect_any(&[refusing, accepting], |_| None).await.unwrap();
        assert_eq!(stream.peer_addr().unwrap(), accepting);
        let error = connect_any(&[refusing], |_| None).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    }
}
