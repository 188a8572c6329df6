package guestimage

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// keys makes the image's two key pairs, writes the client's private key
// and both public keys to the image directory.
func (b *builder) keys() error {
	var err error
	if _, b.clientKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return fmt.Errorf("client key: %w", err)
	}
	if _, b.hostKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return fmt.Errorf("host key: %w", err)
	}
	priv, pub, err := openSSHKey(b.clientKey, "drover guest image client")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.out, identityFile), priv, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.out, identityFile+".pub"), pub, 0o644); err != nil {
		return err
	}
	_, hostPub, err := openSSHKey(b.hostKey, "root@"+Hostname)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.out, hostKeyFile), hostPub, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.out, knownHosts), append([]byte(HostKeyAlias+" "), hostPub...), 0o644)
}

// authorizedKey is the client's public key as an authorized_keys line.
func (b *builder) authorizedKey() (string, error) {
	_, pub, err := openSSHKey(b.clientKey, "drover guest image client")
	return string(pub), err
}

// openSSHKey returns key in OpenSSH's private key format and its public
// half as an authorized_keys line with comment.
func openSSHKey(key ed25519.PrivateKey, comment string) (priv, pub []byte, err error) {
	block, err := ssh.MarshalPrivateKey(key, comment)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	sp, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("public key: %w", err)
	}
	line := ssh.MarshalAuthorizedKey(sp)
	line = append(line[:len(line)-1], []byte(" "+comment+"\n")...)
	return pem.EncodeToMemory(block), line, nil
}

// dropbearKey returns key in dropbear's own host key format: the SSH
// wire encoding of the string "ssh-ed25519" and of the 64-byte private
// key (seed, then public key), which is Go's ed25519.PrivateKey as is.
func dropbearKey(key ed25519.PrivateKey) []byte {
	var b []byte
	for _, s := range [][]byte{[]byte(ssh.KeyAlgoED25519), key} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}
