//! SSH layer: ssh_config, known_hosts, auth, connection pool, exec, SFTP. (issue 3)
