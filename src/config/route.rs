//! Route configurations: virtual hosts, routes and what each route does.
//! (Placeholder: the full model arrives with the route converter.)

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfiguration {
    pub name: String,
}
