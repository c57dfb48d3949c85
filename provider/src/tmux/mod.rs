//! tmux session driver and the command wrapper. (issue 4)
