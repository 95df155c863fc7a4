//! A TCP proxy a test can switch off and on, to make a service unreachable for one
//! component while the rest of the system keeps using it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: SocketAddr,
    up_tx: watch::Sender<bool>,
    _task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target` while up.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (up_tx, up_rx) = watch::channel(true);
        let up_rx = Arc::new(up_rx);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                let mut up = (*up_rx).clone();
                if !*up.borrow() {
                    drop(client);
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut client_read, &mut server_write) => {}
                        _ = tokio::io::copy(&mut server_read, &mut client_write) => {}
                        _ = up.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self { addr, up_tx, _task: task }
    }

    /// Cuts every open connection and refuses new ones.
    pub fn down(&self) {
        let _ = self.up_tx.send(false);
    }

    pub fn up(&self) {
        let _ = self.up_tx.send(true);
    }
}
