//! A TCP proxy on 127.0.0.1 in front of a server, which can make that server unreachable for
//! a while: during an outage every open connection is cut and the port is closed (connection
//! refused), as when the network path to an AWS endpoint fails. Afterwards the same port
//! accepts again, so clients configured with its URL recover on their own.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    /// Connections an outage cut while they were open (proof that it reached the clients).
    cut: Arc<AtomicUsize>,
    /// Bumped at each outage: connections and the accept loop of an older generation end.
    generation: watch::Sender<u64>,
}

impl FaultProxy {
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fault proxy on 127.0.0.1")?;
        let proxy = Self {
            addr: listener.local_addr()?,
            upstream,
            cut: Arc::default(),
            generation: watch::channel(0).0,
        };
        proxy.serve(listener);
        Ok(proxy)
    }

    /// The proxy's URL, to configure clients with instead of the server's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Cuts every connection and refuses new ones for `duration`.
    pub async fn outage(&self, duration: Duration) -> Result<()> {
        self.generation.send_modify(|g| *g += 1);
        tokio::time::sleep(duration).await;
        let socket = TcpSocket::new_v4()?;
        // Accepted connections of the old listener may linger in TIME_WAIT on this port.
        socket.set_reuseaddr(true)?;
        socket
            .bind(self.addr)
            .with_context(|| format!("re-binding the fault proxy on {}", self.addr))?;
        self.serve(socket.listen(1024)?);
        Ok(())
    }

    /// Connections the outages cut while they were open.
    pub fn connections_cut(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }

    fn serve(&self, listener: TcpListener) {
        let upstream = self.upstream;
        let cut_count = self.cut.clone();
        let mut ended = self.generation.subscribe();
        ended.mark_unchanged();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    // Dropping the listener closes the port.
                    _ = ended.changed() => return,
                };
                let Ok((client, _)) = accepted else { continue };
                let mut cut = ended.clone();
                let cut_count = cut_count.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {
                            cut_count.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Ends the accept loop and every connection.
        self.generation.send_modify(|g| *g += 1);
    }
}
