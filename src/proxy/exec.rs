//! Where a worker's tasks run. HTTP/2 stream tasks of downstream connections run on the
//! worker's own thread (`spawn_local`), so connection state can be `Rc` and nothing crosses
//! threads; upstream connections run there too ([`Spawner::Local`]), so a response that
//! wakes its request wakes a task of the same local set.

#[derive(Debug, Clone, Copy, Default)]
pub struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: std::future::Future + 'static,
{
    fn execute(&self, future: F) {
        tokio::task::spawn_local(future);
    }
}

/// Where upstream connection tasks (and an upstream HTTP/2 connection's own tasks) run:
/// the worker's local set, or the runtime when there is none (upstreams used outside a
/// worker, as tests and health checks do).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Spawner {
    /// `tokio::spawn`: the current runtime.
    #[default]
    Runtime,
    /// `spawn_local`: the worker's local set; must be called within one.
    Local,
}

impl Spawner {
    pub fn spawn<F>(self, future: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        hyper::rt::Executor::execute(&self, future);
    }
}

impl<F> hyper::rt::Executor<F> for Spawner
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        match self {
            Self::Runtime => drop(tokio::spawn(future)),
            Self::Local => drop(tokio::task::spawn_local(future)),
        }
    }
}
